//! The cluster map: which drives exist, where they listen, which failure domain
//! (enclosure) each sits in, and the erasure-coding profile new objects get. One TOML
//! file, the same on every drive; see `docs/cluster.md` for an example.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The erasure-coding profile of new objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Data shards per stripe.
    pub k: u16,
    /// Parity shards per stripe.
    pub m: u16,
    /// Chunk size in bytes: a power of two from 4 KiB to 16 MiB. Default 256 KiB.
    #[serde(default = "default_chunk")]
    pub chunk_size: u32,
}

fn first_epoch() -> u64 {
    1
}

fn default_chunk() -> u32 {
    oed_ec::layout::DEFAULT_CHUNK_SIZE
}

/// One drive of the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriveEntry {
    /// The drive's id (its `drive_id` setting).
    pub id: String,
    /// Where its `oedd` listens, `host:port`.
    pub address: String,
    /// Failure domain (enclosure, shelf, power feed). Shards of one object spread over
    /// domains first. Default: the drive's own id (every drive its own domain).
    #[serde(default)]
    pub domain: Option<String>,
    /// `in` (the default) or `out`: a drive that is out gets no new shards; what it
    /// holds stays readable there until it is drained (`oedd admin drain`).
    #[serde(default, skip_serializing_if = "DriveState::is_in")]
    pub state: DriveState,
    /// The drive's capacity in GB (10^9 bytes, as disks are sold): its share of new
    /// shards follows it ([`ClusterMap::place`]). A drive without one weighs as the mean
    /// of those that have one; a map where none has one places every drive alike.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_gb: Option<u64>,
    /// The epoch the drive joined the map at (`oedd admin add`); none for the drives the
    /// map began with. Objects written before it joined were placed without it: they are
    /// looked for where the map of that time placed them too ([`ClusterMap::holders`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
}

/// A shard that the map in force places elsewhere ([`ClusterMap::moves`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardMove {
    /// The shard's index in the record.
    pub shard: usize,
    /// The drive it goes to (an index into [`ClusterMap::drives`]).
    pub to: usize,
}

/// Whether a drive takes new shards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DriveState {
    /// It takes new shards.
    #[default]
    In,
    /// It takes none; its shards stay where they are until it is drained.
    Out,
}

impl DriveState {
    /// Whether this is [`DriveState::In`].
    #[must_use]
    pub fn is_in(&self) -> bool {
        *self == Self::In
    }

    /// `in` or `out`.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::In => "in",
            Self::Out => "out",
        }
    }
}

impl DriveEntry {
    /// The failure domain, defaulting to the drive id.
    #[must_use]
    pub fn domain(&self) -> &str {
        self.domain.as_deref().unwrap_or(&self.id)
    }

    /// `https://address` with `tls`, else `http://address`.
    #[must_use]
    pub fn url(&self, tls: bool) -> String {
        let scheme = if tls { "https" } else { "http" };
        format!("{scheme}://{}", self.address)
    }
}

/// The whole map.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterMap {
    /// Name of the cluster (shown by `oedd dev` and in logs).
    pub cluster_id: String,
    /// The map's version: raise it with every change. A drive refuses to start with a
    /// lower epoch than it ran before, or with a changed map under the same epoch, and
    /// drives refuse shard writes placed by a map of another epoch. Default: 1.
    #[serde(default = "first_epoch")]
    pub epoch: u64,
    /// Whether the drives serve S3 and the peer API over TLS, and so reach each other
    /// with `https://` (each drive needs `tls_cert_file`, `tls_key_file` and
    /// `tls_ca_file`). Default: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tls: bool,
    /// Profile of new objects.
    pub profile: Profile,
    /// Every drive, at least `k + m` of them.
    pub drives: Vec<DriveEntry>,
}

impl ClusterMap {
    /// Reads and validates a map file.
    ///
    /// # Errors
    /// [`Error::Config`] saying what is wrong (naming the file, the drive or the field).
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::Config(format!("cluster_map: cannot read {}: {e}", path.display()))
        })?;
        let map: ClusterMap = toml::from_str(&text)
            .map_err(|e| Error::Config(format!("cluster map {}: {e}", path.display())))?;
        map.validate()
            .map_err(|e| Error::Config(format!("cluster map {}: {e}", path.display())))?;
        Ok(map)
    }

    /// A map of one drive holding whole objects (k = 1, m = 0): what a drive started
    /// without a cluster map serves.
    #[must_use]
    pub fn single(drive_id: &str, address: &str) -> Self {
        Self {
            cluster_id: "single".into(),
            epoch: first_epoch(),
            tls: false,
            profile: Profile {
                k: 1,
                m: 0,
                chunk_size: default_chunk(),
            },
            drives: vec![DriveEntry {
                id: drive_id.to_owned(),
                address: address.to_owned(),
                domain: None,
                state: DriveState::In,
                capacity_gb: None,
                since: None,
            }],
        }
    }

    /// The map a spare drive runs until a map listing it arrives: of `of`'s cluster, at
    /// epoch 0 (below any map's, so the first real one is newer), with this drive alone.
    /// A spare serves no S3 and stores no shard: the peer API refuses shards placed by
    /// another epoch.
    #[must_use]
    pub fn spare(of: &Self, drive_id: &str, address: &str) -> Self {
        Self {
            cluster_id: of.cluster_id.clone(),
            epoch: 0,
            tls: of.tls,
            ..Self::single(drive_id, address)
        }
    }

    /// Whether this is a spare's map ([`ClusterMap::spare`]).
    #[must_use]
    pub fn is_spare(&self) -> bool {
        self.epoch == 0
    }

    /// Checks the profile against the drives and the drives against each other.
    ///
    /// # Errors
    /// A message naming the problem.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.epoch == 0 {
            return Err("epoch: start at 1 and raise it with every change".into());
        }
        let p = self.profile;
        oed_ec::Layout::new(p.k.into(), p.m.into(), p.chunk_size)
            .map_err(|e| format!("profile: {e}"))?;
        // A stripe is held in memory while it is coded: keep it within what a 32-bit
        // drive with 1 GB can spare per request.
        let stripe = u64::from(p.k + p.m) * u64::from(p.chunk_size);
        if stripe > 64 << 20 {
            return Err(format!(
                "profile: (k + m) * chunk_size is {stripe} bytes; keep it within 64 MiB"
            ));
        }
        let total = usize::from(p.k + p.m);
        if self.drives.len() < total {
            return Err(format!(
                "profile k + m = {total} needs at least {total} drives; the map lists {}",
                self.drives.len()
            ));
        }
        let taking = self.drives.iter().filter(|d| d.state.is_in()).count();
        if taking < total {
            return Err(format!(
                "profile k + m = {total} needs at least {total} drives that are in; {taking} of the {} are",
                self.drives.len()
            ));
        }
        let mut ids = HashSet::new();
        let mut addrs = HashSet::new();
        for d in &self.drives {
            if d.id.is_empty()
                || !d
                    .id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            {
                return Err(format!(
                    "drive id {:?}: use letters, digits, '-', '_' or '.'",
                    d.id
                ));
            }
            if !ids.insert(d.id.as_str()) {
                return Err(format!("drive id {:?} is listed twice", d.id));
            }
            if d.address.parse::<std::net::SocketAddr>().is_err()
                && d.address
                    .rsplit_once(':')
                    .is_none_or(|(h, port)| h.is_empty() || port.parse::<u16>().is_err())
            {
                return Err(format!(
                    "drive {:?}: address {:?} is not host:port",
                    d.id, d.address
                ));
            }
            if d.capacity_gb == Some(0) {
                return Err(format!(
                    "drive {:?}: capacity_gb must be at least 1 (leave it out to weigh as the others)",
                    d.id
                ));
            }
            if !addrs.insert(d.address.as_str()) {
                return Err(format!(
                    "drive {:?}: address {} is used by another drive",
                    d.id, d.address
                ));
            }
        }
        Ok(())
    }

    /// A digest of the whole map, to tell two maps of one epoch apart.
    #[must_use]
    pub fn digest(&self) -> String {
        let text = toml::to_string(self).unwrap_or_default();
        hex::encode(Sha256::digest(text.as_bytes()))
    }

    /// The index of drive `id` in [`ClusterMap::drives`].
    #[must_use]
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.drives.iter().position(|d| d.id == id)
    }

    /// The `n` drives (indexes into [`ClusterMap::drives`]) that get the shards of a new
    /// write of `bucket`/`key`, in shard order: drives that are out get none.
    ///
    /// Rendezvous (highest-random-weight) hashing: every drive gets a score from a hash of
    /// the object's name and the drive's id, so adding or removing a drive moves only the
    /// objects that scored it highest. Domains are taken round-robin, each in the order of
    /// its best-scoring drive, so the shards of one object spread over as many failure
    /// domains as there are before two land in the same one.
    ///
    /// With capacities ([`DriveEntry::capacity_gb`]) each drive's chance to hold a shard
    /// of an object follows its capacity: drive `i` of capacity `c_i` should hold one of
    /// the `n` shards with probability `p_i = n * c_i / C` (`C` the capacities' sum), and
    /// a drive with `p_i >= 1` holds one of every object (it is taken first, and the
    /// others share the remaining shards the same way). The score is Pareto sampling's
    /// (Rosén's order sampling with fixed shape): with `u` the hash as a fraction in
    /// (0, 1), `odds(p_i) * odds(u)`, `odds(x) = x / (1 - x)`; the `n` best drives are
    /// taken. Its inclusion probabilities are `p_i` within a few percent for any `n`
    /// (the plain weighted rendezvous score `c_i / -ln(u)` is exact for `n = 1` only, and
    /// gives a drive of four times the capacity a fifth less than its share at `n = 3`).
    /// It is computed in integers, so every architecture places alike. Drives of equal
    /// capacity order as without capacities, so a drive joining or leaving moves only the
    /// objects it takes or held; between drives of different capacities a few percent
    /// more move, as the odds of every drive change with `C`. Without capacities the
    /// order is the unweighted one, unchanged.
    #[must_use]
    pub fn place(&self, bucket: &str, key: &str, n: usize) -> Vec<usize> {
        self.place_among(bucket, key, n, |d| d.state.is_in(), |_| true)
    }

    /// The drives that may hold the shards of `bucket`/`key`: where a new write goes,
    /// where one went before drives were marked out ([`ClusterMap::place`] over every
    /// drive), and where one went before drives were added (the placement over the
    /// drives the map had before each epoch at which some joined, [`DriveEntry::since`]).
    /// Records name their own drives; this is where to look for them.
    #[must_use]
    pub fn holders(&self, bucket: &str, key: &str, n: usize) -> Vec<usize> {
        let mut out = self.place(bucket, key, n);
        let mut add = |placed: Vec<usize>| {
            for i in placed {
                if !out.contains(&i) {
                    out.push(i);
                }
            }
        };
        if self.drives.iter().any(|d| !d.state.is_in()) {
            add(self.place_among(bucket, key, n, |_| true, |_| true));
        }
        let mut joins: Vec<u64> = self.drives.iter().filter_map(|d| d.since).collect();
        joins.sort_unstable();
        joins.dedup();
        for epoch in joins {
            let before = |d: &DriveEntry| d.since.is_none_or(|s| s < epoch);
            add(self.place_among(bucket, key, n, before, before));
        }
        out
    }

    /// The shards of a record whose drives are `drives` that are not where the map in
    /// force places `bucket`/`key`, each paired with the drive it goes to: the shards on
    /// drives outside the placement, in shard order, with the placed drives that hold
    /// none, in placement order. Empty when the record is where the map puts it.
    ///
    /// The pairing is the same whichever holder's copy of the record it is made from, and
    /// stays the same as moves complete (a finished move drops one shard and its drive
    /// from both lists), so every drive agrees where each shard goes without asking.
    #[must_use]
    pub fn moves(&self, bucket: &str, key: &str, drives: &[String]) -> Vec<ShardMove> {
        let placed = self.place(bucket, key, drives.len());
        let leaving = drives
            .iter()
            .enumerate()
            .filter(|(_, d)| !placed.iter().any(|&i| self.drives[i].id == **d))
            .map(|(shard, _)| shard);
        let arriving = placed
            .iter()
            .filter(|&&i| !drives.contains(&self.drives[i].id));
        leaving
            .zip(arriving)
            .map(|(shard, &to)| ShardMove { shard, to })
            .collect()
    }

    fn place_among(
        &self,
        bucket: &str,
        key: &str,
        n: usize,
        take: impl Fn(&DriveEntry) -> bool,
        era: impl Fn(&DriveEntry) -> bool,
    ) -> Vec<usize> {
        // A kept version stays with its key.
        let key = crate::record::placement_key(key);
        // Drives without a capacity weigh as the mean of those of the map (of the epoch)
        // that have one, whether they are in or out.
        let weights = self.weights_among(&|d: &DriveEntry| era(d));
        let taken: Vec<usize> = (0..self.drives.len())
            .filter(|&i| take(&self.drives[i]))
            .collect();
        let odds = weights.map(|w| Odds::of(&taken, &w, n));
        let mut scored: Vec<(u128, usize)> = taken
            .iter()
            .map(|&i| {
                let u = score(bucket, key, &self.drives[i].id);
                match &odds {
                    None => (u128::from(u), i),
                    Some(o) => (o.score(i, u), i),
                }
            })
            .collect();
        scored.sort_unstable_by(|a, b| b.cmp(a));
        // Domains in the order of their best drive; each domain's drives by score.
        let mut domains: BTreeMap<&str, (usize, Vec<usize>)> = BTreeMap::new();
        for (rank, &(_, i)) in scored.iter().enumerate() {
            let entry = domains
                .entry(self.drives[i].domain())
                .or_insert((rank, Vec::new()));
            entry.1.push(i);
        }
        let mut order: Vec<(usize, Vec<usize>)> = domains.into_values().collect();
        order.sort_unstable_by_key(|(rank, _)| *rank);
        let mut out = Vec::with_capacity(n);
        let mut round = 0;
        while out.len() < n.min(scored.len()) {
            for (_, drives) in &order {
                if let Some(&i) = drives.get(round) {
                    out.push(i);
                    if out.len() == n {
                        break;
                    }
                }
            }
            round += 1;
        }
        out
    }
}

impl ClusterMap {
    /// Each drive's weight: its capacity, or the mean of the capacities given; `None`
    /// when no drive has one.
    #[must_use]
    pub fn weights(&self) -> Option<Vec<u64>> {
        self.weights_among(&|_| true)
    }

    /// [`ClusterMap::weights`], the mean taken over the drives `take` takes (a placement
    /// over the drives of an earlier epoch weighs them as that map did).
    fn weights_among(&self, take: &impl Fn(&DriveEntry) -> bool) -> Option<Vec<u64>> {
        let given: Vec<u64> = self
            .drives
            .iter()
            .filter(|d| take(d))
            .filter_map(|d| d.capacity_gb)
            .collect();
        if given.is_empty() {
            return None;
        }
        let mean =
            (given.iter().map(|&c| u128::from(c)).sum::<u128>() / given.len() as u128).max(1);
        let mean = u64::try_from(mean).unwrap_or(u64::MAX);
        Some(
            self.drives
                .iter()
                .map(|d| d.capacity_gb.unwrap_or(mean))
                .collect(),
        )
    }
}

/// The odds of each drive taking part in a placement to hold one of `n` shards, as
/// integers: drive `i` holds one with probability `a_i / (a_i + b_i)`, or always.
struct Odds {
    /// By drive index: `None` for a drive that holds one of every object, else `(a, b)`.
    odds: Vec<Option<(u128, u128)>>,
}

impl Odds {
    /// The odds of the drives `taken`, weighing `weights` (by drive index), for `n`
    /// shards: `p_i = m * c_i / C` over the drives not always taken, `m` the shards left
    /// for them; a drive with `p_i >= 1` is always taken, and the rest are shared again.
    fn of(taken: &[usize], weights: &[u64], n: usize) -> Self {
        // At most 24 bits of weight: the products below stay within 128 bits.
        let top = taken.iter().map(|&i| weights[i]).max().unwrap_or(1).max(1);
        let shift = (64 - top.leading_zeros()).saturating_sub(24);
        let c = |i: usize| u128::from((weights[i] >> shift).max(1));
        let mut always = vec![false; weights.len()];
        loop {
            let left = taken.iter().filter(|&&i| !always[i]);
            let m = n.saturating_sub(taken.iter().filter(|&&i| always[i]).count()) as u128;
            let total: u128 = left.clone().map(|&i| c(i)).sum();
            let full: Vec<usize> = left.copied().filter(|&i| m * c(i) >= total).collect();
            if full.is_empty() || m == 0 {
                let odds = (0..weights.len())
                    .map(|i| {
                        (!always[i]).then(|| (m * c(i), total.saturating_sub(m * c(i)).max(1)))
                    })
                    .collect();
                return Self { odds };
            }
            for i in full {
                always[i] = true;
            }
        }
    }

    /// Drive `i`'s score for hash `u`: `odds(p_i) * u / (2^64 - u)`, 30 fraction bits;
    /// a drive always taken scores above every other, ordered by `u`.
    fn score(&self, i: usize, u: u64) -> u128 {
        match self.odds[i] {
            None => (1 << 127) | u128::from(u),
            Some((a, b)) => {
                let num = a * u128::from(u);
                let den = b * ((1u128 << 64) - u128::from(u));
                (num << 30) / den
            }
        }
    }
}

fn score(bucket: &str, key: &str, drive: &str) -> u64 {
    let mut h = Sha256::new();
    for part in [bucket, key, drive] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    let d = h.finalize();
    u64::from_le_bytes(d[..8].try_into().unwrap_or_default())
}

/// The epoch and digest of the cluster map a drive last ran, kept in its store: a drive
/// refuses to start on an older map, or on a changed one under the same epoch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RanMap {
    /// The map's epoch.
    pub epoch: u64,
    /// Its digest ([`ClusterMap::digest`]).
    pub digest: String,
}

impl RanMap {
    /// What running `map` is recorded as.
    #[must_use]
    pub fn of(map: &ClusterMap) -> Self {
        Self {
            epoch: map.epoch,
            digest: map.digest(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(drives: &[(&str, &str)], k: u16, m: u16) -> ClusterMap {
        ClusterMap {
            tls: false,
            epoch: 1,
            cluster_id: "t".into(),
            profile: Profile {
                k,
                m,
                chunk_size: 4096,
            },
            drives: drives
                .iter()
                .enumerate()
                .map(|(i, (id, dom))| DriveEntry {
                    id: (*id).into(),
                    address: format!("127.0.0.1:{}", 9000 + i),
                    domain: Some((*dom).into()),
                    state: DriveState::In,
                    capacity_gb: None,
                    since: None,
                })
                .collect(),
        }
    }

    #[test]
    fn placement_is_stable_distinct_and_spreads_domains() {
        let m = map(
            &[
                ("a", "e1"),
                ("b", "e1"),
                ("c", "e1"),
                ("d", "e2"),
                ("e", "e2"),
                ("f", "e2"),
                ("g", "e3"),
                ("h", "e3"),
            ],
            2,
            1,
        );
        m.validate().unwrap();
        let mut first_drive = HashSet::new();
        for i in 0..200 {
            let key = format!("obj-{i}");
            let p = m.place("bkt", &key, 3);
            assert_eq!(
                p,
                m.place("bkt", &key, 3),
                "placement must be deterministic"
            );
            let distinct: HashSet<_> = p.iter().collect();
            assert_eq!(distinct.len(), 3);
            let domains: HashSet<_> = p.iter().map(|&i| m.drives[i].domain()).collect();
            assert_eq!(domains.len(), 3, "3 shards over 3 domains: {p:?}");
            first_drive.insert(p[0]);
        }
        assert_eq!(first_drive.len(), 8, "every drive leads some objects");
        // More shards than domains: domains are reused only after each got one.
        let p = m.place("bkt", "x", 6);
        let doms: Vec<_> = p.iter().map(|&i| m.drives[i].domain()).collect();
        let firsts: HashSet<_> = doms[..3].iter().collect();
        assert_eq!(firsts.len(), 3, "{doms:?}");
    }

    /// A map of drives `d0`.. each its own domain, with these capacities.
    fn weighted_map(capacities: &[Option<u64>]) -> ClusterMap {
        let ids: Vec<(String, String)> = (0..capacities.len())
            .map(|i| (format!("d{i}"), format!("d{i}")))
            .collect();
        let pairs: Vec<(&str, &str)> = ids.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        let mut m = map(&pairs, 1, 0);
        for (d, c) in m.drives.iter_mut().zip(capacities) {
            d.capacity_gb = *c;
        }
        m
    }

    #[test]
    #[allow(
        clippy::cast_precision_loss,
        reason = "counts compared within a few percent"
    )]
    fn shares_follow_capacity() {
        // Four drives of 1 TB and two of 4 TB: 4/12 and 1/12 of the first shards each.
        let m = weighted_map(&[
            Some(1000),
            Some(1000),
            Some(4000),
            Some(1000),
            Some(4000),
            Some(1000),
        ]);
        let n = 60_000;
        let mut first = [0usize; 6];
        for i in 0..n {
            first[m.place("b", &format!("k{i}"), 1)[0]] += 1;
        }
        for (d, &got) in first.iter().enumerate() {
            let want = n as f64 * m.drives[d].capacity_gb.unwrap() as f64 / 12_000.0;
            assert!(
                (got as f64 - want).abs() < want * 0.05,
                "drive {d}: {got} of {n}, expected about {want}"
            );
        }
        // Drives without a capacity weigh as the mean of the others.
        let m = weighted_map(&[Some(1000), None, Some(3000)]);
        assert_eq!(m.weights().unwrap(), vec![1000, 2000, 3000]);
        // A map without capacities places as it always did.
        let plain = weighted_map(&[None, None, None, None]);
        let equal = weighted_map(&[Some(7), Some(7), Some(7), Some(7)]);
        assert!(plain.weights().is_none());
        let same = (0..2000)
            .filter(|i| {
                let k = format!("k{i}");
                plain.place("b", &k, 3) == equal.place("b", &k, 3)
            })
            .count();
        assert!(
            same >= 1990,
            "equal weights order as no weights: {same} of 2000"
        );
    }

    #[test]
    #[allow(
        clippy::cast_precision_loss,
        reason = "counts compared within a few percent"
    )]
    fn every_shard_follows_capacity_and_full_drives_hold_one_of_each() {
        // n = 3 of 6 drives of 1 TB and 2 of 4 TB: 3/14 and 12/14 of the objects.
        let mut caps = vec![Some(1000); 6];
        caps.extend([Some(4000); 2]);
        let m = weighted_map(&caps);
        let n = 30_000;
        let mut held = [0usize; 8];
        for i in 0..n {
            for d in m.place("b", &format!("k{i}"), 3) {
                held[d] += 1;
            }
        }
        for (d, &got) in held.iter().enumerate() {
            let want = n as f64 * 3.0 * m.drives[d].capacity_gb.unwrap() as f64 / 14_000.0;
            assert!(
                (got as f64 - want).abs() < want * 0.05,
                "drive {d}: {got} of {n}, expected about {want}"
            );
        }
        // n = 6 of the same: the 4 TB drives would want 12/7 of a shard each, so they hold
        // one of every object, and the others share the 4 shards left (2/3 each).
        let mut held = [0usize; 8];
        for i in 0..n {
            for d in m.place("b", &format!("k{i}"), 6) {
                held[d] += 1;
            }
        }
        assert_eq!(held[6..], [n, n]);
        for &got in &held[..6] {
            let want = n as f64 * 4.0 / 6.0;
            assert!((got as f64 - want).abs() < want * 0.05, "{held:?}");
        }
    }

    #[test]
    #[allow(
        clippy::cast_precision_loss,
        reason = "counts compared within a few percent"
    )]
    fn a_drive_joining_takes_its_share_and_moves_nothing_else() {
        let six = weighted_map(&[Some(2000); 6]);
        let mut eight = weighted_map(&[Some(2000); 8]);
        eight.drives[6].capacity_gb = Some(4000);
        eight.drives[7].capacity_gb = Some(4000);
        let n = 40_000;
        let mut moved = 0;
        for i in 0..n {
            let k = format!("k{i}");
            let before = six.drives[six.place("b", &k, 1)[0]].id.clone();
            let after = eight.drives[eight.place("b", &k, 1)[0]].id.clone();
            if before != after {
                assert!(after == "d6" || after == "d7", "{k}: {before} -> {after}");
                moved += 1;
            }
        }
        // The new drives' share: 8000 of 20000.
        let want = n as f64 * 0.4;
        assert!(
            (moved as f64 - want).abs() < want * 0.05,
            "{moved} moved, about {want} expected"
        );
    }

    #[test]
    fn objects_written_before_drives_joined_are_still_looked_for_where_they_went() {
        let six = weighted_map(&[None; 6]);
        let mut nine = weighted_map(&[None; 9]);
        for d in &mut nine.drives[6..] {
            d.since = Some(2);
            d.capacity_gb = None;
        }
        let mut twelve = nine.clone();
        twelve.drives.extend(
            weighted_map(&[None; 12]).drives[9..]
                .iter()
                .cloned()
                .map(|mut d| {
                    d.since = Some(5);
                    d
                }),
        );
        twelve.validate().unwrap();
        for i in 0..500 {
            let k = format!("k{i}");
            let asked = twelve.holders("b", &k, 6);
            for d in six
                .place("b", &k, 6)
                .into_iter()
                .chain(nine.place("b", &k, 6))
            {
                assert!(
                    asked.contains(&d),
                    "{k}: drive {d} placed it once and is not asked"
                );
            }
            assert_eq!(asked[..6], twelve.place("b", &k, 6)[..], "new writes first");
        }
    }

    #[test]
    fn moves_pair_leaving_shards_with_new_drives_alike_from_any_copy() {
        let six = weighted_map(&[None; 6]);
        let mut eight = weighted_map(&[None; 8]);
        for d in &mut eight.drives[6..] {
            d.since = Some(2);
            d.capacity_gb = None;
        }
        let (mut total, mut two) = (0, 0);
        for i in 0..2000 {
            let k = format!("k{i}");
            let drives: Vec<String> = six
                .place("b", &k, 6)
                .into_iter()
                .map(|i| six.drives[i].id.clone())
                .collect();
            assert!(
                six.moves("b", &k, &drives).is_empty(),
                "{k}: placed already"
            );
            let moves = eight.moves("b", &k, &drives);
            let placed: Vec<usize> = eight.place("b", &k, 6);
            // Exactly the shards outside the placement move, each to a placed drive.
            let outside = drives
                .iter()
                .filter(|d| !placed.iter().any(|&i| eight.drives[i].id == **d))
                .count();
            assert_eq!(moves.len(), outside, "{k}");
            total += moves.len();
            if moves.len() == 2 {
                two += 1;
            }
            // Done one at a time, in any order, the rest of the pairing stays.
            for first in 0..moves.len() {
                let mut after = drives.clone();
                let m = moves[first];
                after[m.shard].clone_from(&eight.drives[m.to].id);
                let rest: Vec<ShardMove> = moves.iter().copied().filter(|x| *x != m).collect();
                assert_eq!(eight.moves("b", &k, &after), rest, "{k}");
            }
        }
        // Six of eight drives per object: 1.5 shards of 6 move on average.
        assert!((2600..3400).contains(&total), "{total} shards moved");
        assert!(two > 0);
    }

    #[test]
    fn removing_a_drive_moves_only_its_objects() {
        let full = map(&[("a", "a"), ("b", "b"), ("c", "c"), ("d", "d")], 1, 0);
        let less = map(&[("a", "a"), ("b", "b"), ("c", "c")], 1, 0);
        for i in 0..100 {
            let key = format!("k{i}");
            let before = full.drives[full.place("b", &key, 1)[0]].id.clone();
            let after = less.drives[less.place("b", &key, 1)[0]].id.clone();
            if before != "d" {
                assert_eq!(before, after);
            }
        }
    }

    #[test]
    fn a_drive_that_is_out_gets_no_new_shards_and_is_still_asked() {
        let ids: Vec<(String, String)> =
            (0..7).map(|i| (format!("d{i}"), format!("d{i}"))).collect();
        let pairs: Vec<(&str, &str)> = ids.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        let all = map(&pairs, 4, 2);
        let mut out = all.clone();
        out.drives[3].state = DriveState::Out;
        out.validate().unwrap();
        let mut moved = 0;
        for i in 0..300 {
            let key = format!("k{i}");
            let before = all.place("b", &key, 6);
            let now = out.place("b", &key, 6);
            assert!(!now.contains(&3), "{key}: placed on the drive that is out");
            assert_eq!(now.len(), 6);
            let asked = out.holders("b", &key, 6);
            for d in before.iter().chain(&now) {
                assert!(asked.contains(d), "{key}: holder {d} not asked");
            }
            if before.contains(&3) {
                moved += 1;
                assert_eq!(asked.len(), 7);
            } else {
                assert_eq!(before, now, "{key}: moved without need");
                assert_eq!(asked, now);
            }
        }
        assert!(moved > 0);
        // Too few drives left in for the profile.
        out.drives[4].state = DriveState::Out;
        assert!(out.validate().unwrap_err().contains("that are in"));
    }

    #[test]
    fn validation_names_the_problem() {
        let mut m = map(&[("a", "x"), ("b", "x")], 2, 1);
        assert!(m.validate().unwrap_err().contains("at least 3 drives"));
        m.profile.m = 0;
        m.validate().unwrap();
        m.drives[1].id = "a".into();
        assert!(m.validate().unwrap_err().contains("listed twice"));
        m.drives[1].id = "b c".into();
        assert!(m.validate().unwrap_err().contains("drive id"));
        m.drives[1].id = "b".into();
        m.drives[1].address = "nowhere".into();
        assert!(m.validate().unwrap_err().contains("host:port"));
        m.drives[1].address = m.drives[0].address.clone();
        assert!(m.validate().unwrap_err().contains("used by another"));
        m.drives[1].address = "127.0.0.1:1".into();
        m.profile.chunk_size = 1000;
        assert!(m.validate().unwrap_err().contains("profile"));
    }
}
