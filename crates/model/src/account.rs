//! Accounts: the access keys S3 clients sign with and the rights each has in each bucket,
//! as one table that every drive holds whole (`docs/access.md`).
//!
//! The table is a set of entries, one per key ([`AccessKey`]) and one per bucket with
//! grants ([`BucketAccess`]), each carrying the [`VersionId`] of its last change. Drives
//! merge entries by keeping the one with the larger version, whatever the order they
//! arrive in; a deleted key stays as an entry that says so, so that an older copy of it
//! cannot bring it back. Two drives hold the same table when their [`AccountTable::digest`]s
//! agree: an order-free sum of every entry's name and version, kept as entries change.
//!
//! A key's secret is never stored plain: [`AccountKeys`] seals it with a key derived from
//! the cluster secret (ChaCha20-Poly1305, a random nonce per seal, the key's id bound in),
//! and signs every entry with another, so that drives take no entry that the cluster did
//! not make ([`SignedEntry`]).

use std::collections::{BTreeMap, HashMap};

use ring::aead;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::policy::Policy;
use crate::record::VersionId;

/// What a key may do in a bucket. `owner` does not imply the others: a key given only
/// `owner` may change the bucket's settings and delete it, not read or write its objects
/// (as Garage's rights).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rights {
    /// GET, HEAD, listings, near-data operations that only read.
    #[serde(default)]
    pub read: bool,
    /// PUT, copy into, delete, multipart, operations that write.
    #[serde(default)]
    pub write: bool,
    /// Bucket settings and policy, deleting the bucket.
    #[serde(default)]
    pub owner: bool,
}

impl Rights {
    /// Every right.
    pub const ALL: Self = Self {
        read: true,
        write: true,
        owner: true,
    };

    /// Whether these include `right`.
    #[must_use]
    pub fn allow(self, right: Right) -> bool {
        match right {
            Right::Read => self.read,
            Right::Write => self.write,
            Right::Owner => self.owner,
        }
    }

    /// Whether none is given.
    #[must_use]
    pub fn is_none(self) -> bool {
        !(self.read || self.write || self.owner)
    }

    /// These with the rights of `other` added (`allow`) or taken away (`deny`).
    #[must_use]
    pub fn with(self, other: Self, give: bool) -> Self {
        let f = |mine: bool, theirs: bool| if theirs { give } else { mine };
        Self {
            read: f(self.read, other.read),
            write: f(self.write, other.write),
            owner: f(self.owner, other.owner),
        }
    }
}

/// One right, as an operation needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Right {
    /// See [`Rights::read`].
    Read,
    /// See [`Rights::write`].
    Write,
    /// See [`Rights::owner`].
    Owner,
}

/// An access key: its id (what a client sends), its sealed secret, and when it was made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessKey {
    /// The access key id: `OED` and 17 upper-case letters and digits.
    pub id: String,
    /// A name for people, not unique.
    pub name: String,
    /// The secret, sealed ([`AccountKeys::seal`]); empty once the key is deleted.
    pub secret: String,
    /// Milliseconds since the epoch it was made at.
    pub created_ms: u64,
    /// Deleted: kept so that an older copy cannot bring it back.
    #[serde(default)]
    pub deleted: bool,
    /// The version of its last change.
    pub version: VersionId,
}

/// The grants of a bucket: which keys have which rights there. A bucket without an entry
/// grants nothing to anyone but the bootstrap key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BucketAccess {
    /// The bucket's name.
    pub bucket: String,
    /// Rights by access key id; a key with none is not listed.
    #[serde(default)]
    pub grants: BTreeMap<String, Rights>,
    /// The version of its last change.
    pub version: VersionId,
}

/// A bucket's policy ([`crate::policy`]): `None` once deleted, kept so that an older copy
/// cannot bring it back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BucketPolicy {
    /// The bucket's name.
    pub bucket: String,
    /// The policy as it was put (JSON), checked by [`Policy::parse`] first.
    #[serde(default)]
    pub policy: Option<String>,
    /// The version of its last change.
    pub version: VersionId,
}

/// A bucket's settings that every drive applies to its requests: its versioning, its
/// tags and its lifecycle rules. Reset (to the defaults) when the bucket is deleted, kept so that an older copy
/// cannot bring them back.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BucketSettings {
    /// The bucket's name.
    pub bucket: String,
    /// Its versioning state.
    #[serde(default)]
    pub versioning: Versioning,
    /// Its tags (S3 bucket tagging); none: it has no tag set.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tags: std::collections::BTreeMap<String, String>,
    /// Its lifecycle rules; none: it has no lifecycle configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<crate::lifecycle::Lifecycle>,
    /// Its object lock configuration; none: object lock is not enabled (once enabled, it
    /// stays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_lock: Option<ObjectLock>,
    /// The version of its last change.
    pub version: VersionId,
}

/// A bucket's object lock configuration: enabled, with the retention new versions get
/// when their write names none.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectLock {
    /// The default retention, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_retention: Option<DefaultRetention>,
}

/// A bucket's default retention: its mode, and how long from a version's write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefaultRetention {
    /// The mode.
    pub mode: crate::record::LockMode,
    /// Days (set when the configuration gave `Days`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<u32>,
    /// Years (set when it gave `Years`; a year is 365 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub years: Option<u32>,
}

impl DefaultRetention {
    /// The retention of a version written at `now_ms`.
    #[must_use]
    pub fn at(self, now_ms: u64) -> crate::record::Retention {
        let days = u64::from(self.days.unwrap_or(0)) + 365 * u64::from(self.years.unwrap_or(0));
        crate::record::Retention {
            mode: self.mode,
            until_ms: now_ms.saturating_add(days.saturating_mul(crate::lifecycle::DAY_MS)),
        }
    }
}

/// A bucket's versioning state, as S3 names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Versioning {
    /// Never enabled: every write replaces the key's `null` version.
    #[default]
    Unversioned,
    /// Each write is a version of its own; a delete adds a delete marker.
    Enabled,
    /// Enabled once, now off: writes replace the `null` version, earlier versions stay.
    Suspended,
}

impl Versioning {
    /// Whether writes keep the version they replace (enabled or suspended: a version of
    /// its own is kept; unversioned buckets have none).
    #[must_use]
    pub fn configured(self) -> bool {
        self != Self::Unversioned
    }
}

/// One entry of the table, as drives store and send it: the entry and its MAC
/// ([`AccountKeys::sign`]), so that an entry altered or made up on the way, or on a disk,
/// is refused wherever it arrives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedEntry {
    /// The entry.
    pub entry: AccountEntry,
    /// Hex of `HMAC-SHA256(account key, "oed account entry v1\n" + the entry's JSON)`.
    pub mac: String,
}

/// One entry of the table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AccountEntry {
    /// An access key.
    Key(AccessKey),
    /// A bucket's grants.
    Bucket(BucketAccess),
    /// A bucket's policy.
    Policy(BucketPolicy),
    /// A bucket's settings.
    Settings(BucketSettings),
}

impl AccountEntry {
    /// Its name in the table: `k/<key id>`, `b/<bucket>`, `p/<bucket>` or `s/<bucket>`;
    /// the store keeps it under it.
    #[must_use]
    pub fn name(&self) -> String {
        match self {
            Self::Key(k) => format!("k/{}", k.id),
            Self::Bucket(b) => format!("b/{}", b.bucket),
            Self::Policy(p) => format!("p/{}", p.bucket),
            Self::Settings(s) => format!("s/{}", s.bucket),
        }
    }

    /// The version of its last change.
    #[must_use]
    pub fn version(&self) -> VersionId {
        match self {
            Self::Key(k) => k.version,
            Self::Bucket(b) => b.version,
            Self::Policy(p) => p.version,
            Self::Settings(s) => s.version,
        }
    }

    /// Sets the version of its last change.
    pub fn set_version(&mut self, version: VersionId) {
        match self {
            Self::Key(k) => k.version = version,
            Self::Bucket(b) => b.version = version,
            Self::Policy(p) => p.version = version,
            Self::Settings(s) => s.version = version,
        }
    }
}

impl SignedEntry {
    /// What the table's digest adds for it: its name, version and MAC, so that two
    /// entries of one name and version that differ (made at once on two drives) show as
    /// a difference.
    fn fingerprint(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(self.entry.name().as_bytes());
        h.update([0]);
        h.update(self.entry.version().0.to_be_bytes());
        h.update(self.mac.as_bytes());
        h.finalize().into()
    }

    /// Whether it replaces `old`, an entry of the same name: a larger version, or, of two
    /// of one version, the larger MAC (a rule every drive applies alike).
    #[must_use]
    pub fn replaces(&self, old: &SignedEntry) -> bool {
        (self.entry.version(), &self.mac) > (old.entry.version(), &old.mac)
    }
}

/// The whole table, indexed for the checks every request makes. It holds entries as
/// signed; checking the signatures is for whoever takes them from a network or a disk.
#[derive(Clone, Debug, Default)]
pub struct AccountTable {
    /// Key entries by key id.
    keys: HashMap<String, SignedEntry>,
    /// Bucket entries by bucket.
    buckets: HashMap<String, SignedEntry>,
    /// Policy entries by bucket.
    policies: HashMap<String, SignedEntry>,
    /// Settings entries by bucket.
    settings: HashMap<String, SignedEntry>,
    /// The policies in force, parsed, by bucket. A stored policy that does not parse
    /// (one a later version understands) lets nobody in.
    parsed: HashMap<String, Policy>,
    /// XOR of every entry's fingerprint: the same for the same entries in any order.
    digest: [u8; 32],
}

impl AccountTable {
    /// A table of `entries`, merged as [`AccountTable::merge`] does.
    #[must_use]
    pub fn of(entries: impl IntoIterator<Item = SignedEntry>) -> Self {
        let mut t = Self::default();
        for e in entries {
            t.merge(e);
        }
        t
    }

    /// Takes `signed` if the table has no entry of its name or an older one (a smaller
    /// version). Returns whether it was taken.
    pub fn merge(&mut self, signed: SignedEntry) -> bool {
        if !self.is_newer(&signed) {
            return false;
        }
        if let Some(old) = self.get(&signed.entry.name()) {
            let fp = old.fingerprint();
            xor(&mut self.digest, &fp);
        }
        xor(&mut self.digest, &signed.fingerprint());
        match &signed.entry {
            AccountEntry::Key(k) => {
                self.keys.insert(k.id.clone(), signed);
            }
            AccountEntry::Bucket(b) => {
                self.buckets.insert(b.bucket.clone(), signed);
            }
            AccountEntry::Policy(p) => {
                match p.policy.as_deref().map(|t| Policy::parse(&p.bucket, t)) {
                    Some(Ok(parsed)) => self.parsed.insert(p.bucket.clone(), parsed),
                    _ => self.parsed.remove(&p.bucket),
                };
                self.policies.insert(p.bucket.clone(), signed);
            }
            AccountEntry::Settings(b) => {
                self.settings.insert(b.bucket.clone(), signed);
            }
        }
        true
    }

    /// Whether [`AccountTable::merge`] would take `signed` ([`SignedEntry::replaces`]).
    #[must_use]
    pub fn is_newer(&self, signed: &SignedEntry) -> bool {
        self.get(&signed.entry.name())
            .is_none_or(|old| signed.replaces(old))
    }

    /// The entry of `name` (`k/<id>`, `b/<bucket>`, `p/<bucket>`, `s/<bucket>`).
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&SignedEntry> {
        if let Some(id) = name.strip_prefix("k/") {
            return self.keys.get(id);
        }
        if let Some(bucket) = name.strip_prefix("p/") {
            return self.policies.get(bucket);
        }
        if let Some(bucket) = name.strip_prefix("s/") {
            return self.settings.get(bucket);
        }
        self.buckets.get(name.strip_prefix("b/")?)
    }

    /// The key of `id`, deleted or not.
    fn any_key(&self, id: &str) -> Option<&AccessKey> {
        match &self.keys.get(id)?.entry {
            AccountEntry::Key(k) => Some(k),
            _ => None,
        }
    }

    /// The key of `id`, unless it was deleted.
    #[must_use]
    pub fn key(&self, id: &str) -> Option<&AccessKey> {
        self.any_key(id).filter(|k| !k.deleted)
    }

    /// The keys not deleted, by id.
    #[must_use]
    pub fn keys(&self) -> Vec<&AccessKey> {
        let mut v: Vec<_> = self.keys.keys().filter_map(|id| self.key(id)).collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }

    /// The grants of `bucket`, if it has an entry.
    #[must_use]
    pub fn bucket(&self, bucket: &str) -> Option<&BucketAccess> {
        match &self.buckets.get(bucket)?.entry {
            AccountEntry::Bucket(b) => Some(b),
            _ => None,
        }
    }

    /// The policy of `bucket` as it was put, if it has one.
    #[must_use]
    pub fn policy_text(&self, bucket: &str) -> Option<&str> {
        match &self.policies.get(bucket)?.entry {
            AccountEntry::Policy(p) => p.policy.as_deref(),
            _ => None,
        }
    }

    /// The settings of `bucket`, if it has an entry.
    #[must_use]
    pub fn settings(&self, bucket: &str) -> Option<&BucketSettings> {
        match &self.settings.get(bucket)?.entry {
            AccountEntry::Settings(s) => Some(s),
            _ => None,
        }
    }

    /// The versioning state of `bucket`.
    #[must_use]
    pub fn versioning(&self, bucket: &str) -> Versioning {
        self.settings(bucket)
            .map(|s| s.versioning)
            .unwrap_or_default()
    }

    /// The buckets with lifecycle rules, with them, by name.
    #[must_use]
    pub fn lifecycles(&self) -> Vec<(String, crate::lifecycle::Lifecycle)> {
        let mut out: Vec<_> = self
            .settings
            .iter()
            .filter_map(|(b, e)| match &e.entry {
                AccountEntry::Settings(s) => Some((b.clone(), s.lifecycle.clone()?)),
                _ => None,
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The policy in force in `bucket`, parsed.
    #[must_use]
    pub fn policy(&self, bucket: &str) -> Option<&Policy> {
        self.parsed.get(bucket)
    }

    /// What key `id` may do in `bucket`: nothing for a deleted or unknown key.
    #[must_use]
    pub fn rights(&self, id: &str, bucket: &str) -> Rights {
        if self.key(id).is_none() {
            return Rights::default();
        }
        self.bucket(bucket)
            .and_then(|b| b.grants.get(id))
            .copied()
            .unwrap_or_default()
    }

    /// Every entry, deleted keys included (what another drive needs to agree).
    #[must_use]
    pub fn entries(&self) -> Vec<SignedEntry> {
        self.keys
            .values()
            .chain(self.buckets.values())
            .chain(self.policies.values())
            .chain(self.settings.values())
            .cloned()
            .collect()
    }

    /// How many entries it holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.keys.len() + self.buckets.len() + self.policies.len() + self.settings.len()
    }

    /// Whether it holds none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The table's digest, hex: equal on two drives when they hold the same entries at
    /// the same versions.
    #[must_use]
    pub fn digest(&self) -> AccountDigest {
        AccountDigest {
            digest: hex::encode(self.digest),
            entries: self.len(),
        }
    }
}

fn xor(into: &mut [u8; 32], x: &[u8; 32]) {
    for (a, b) in into.iter_mut().zip(x) {
        *a ^= b;
    }
}

/// How long `oedd admin bucket info` counts a bucket's objects before it answers with
/// what it counted.
pub const BUCKET_COUNT_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A drive's digest of its table and its size, as drives compare them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountDigest {
    /// [`AccountTable::digest`].
    pub digest: String,
    /// [`AccountTable::len`].
    pub entries: usize,
}

/// A new access key id: `OED` and 17 random upper-case letters and digits (20 characters,
/// as AWS's).
#[must_use]
pub fn new_key_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let tail: String = (0..17)
        .map(|_| char::from(ALPHABET[rand::random::<usize>() % ALPHABET.len()]))
        .collect();
    format!("OED{tail}")
}

/// Whether `id` has the form of [`new_key_id`]'s ids.
#[must_use]
pub fn is_key_id(id: &str) -> bool {
    id.len() == 20
        && id.starts_with("OED")
        && id[3..]
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// A new secret: 40 characters of base-64 alphabet without `+` and `/` (about 238 bits).
#[must_use]
pub fn new_secret() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    (0..40)
        .map(|_| char::from(ALPHABET[rand::random::<usize>() % ALPHABET.len()]))
        .collect()
}

/// The keys that protect the table, derived from the cluster secret: one seals and opens
/// key secrets, so that the table on disk and on the peer network holds no secret anyone
/// without the cluster secret can use; one signs entries, so that nobody without it can
/// make or change one.
pub struct AccountKeys {
    aead: aead::LessSafeKey,
    mac: ring::hmac::Key,
}

impl std::fmt::Debug for AccountKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AccountKeys(..)")
    }
}

/// Bytes of a seal's nonce, sent before the ciphertext.
const NONCE_LEN: usize = 12;

impl AccountKeys {
    /// The keys of a cluster: `HMAC-SHA256(cluster secret, "oed account secrets v1")` for
    /// secrets, `HMAC-SHA256(cluster secret, "oed account entries v1")` for entries.
    #[must_use]
    pub fn derive(cluster_secret: &[u8]) -> Self {
        let root = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, cluster_secret);
        let secrets = ring::hmac::sign(&root, b"oed account secrets v1");
        let entries = ring::hmac::sign(&root, b"oed account entries v1");
        let key = aead::UnboundKey::new(&aead::CHACHA20_POLY1305, secrets.as_ref())
            .expect("32 bytes is ChaCha20-Poly1305's key length");
        Self {
            aead: aead::LessSafeKey::new(key),
            mac: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, entries.as_ref()),
        }
    }

    /// What an entry's MAC is computed over: a label, then its JSON.
    fn signed_bytes(entry: &AccountEntry) -> Vec<u8> {
        let mut msg = b"oed account entry v1\n".to_vec();
        serde_json::to_writer(&mut msg, entry).expect("an entry serialises");
        msg
    }

    /// `entry` with its MAC.
    #[must_use]
    pub fn sign(&self, entry: AccountEntry) -> SignedEntry {
        let mac = hex::encode(ring::hmac::sign(&self.mac, &Self::signed_bytes(&entry)));
        SignedEntry { entry, mac }
    }

    /// The entry, when its MAC is this cluster's for it (compared in constant time).
    #[must_use]
    pub fn verify(&self, signed: &SignedEntry) -> bool {
        let msg = Self::signed_bytes(&signed.entry);
        hex::decode(&signed.mac).is_ok_and(|mac| ring::hmac::verify(&self.mac, &msg, &mac).is_ok())
    }

    /// `secret` sealed for key `id` (bound in: a sealed secret moved to another key does
    /// not open), hex of nonce, ciphertext and tag.
    #[must_use]
    pub fn seal(&self, id: &str, secret: &str) -> String {
        let nonce: [u8; NONCE_LEN] = rand::random();
        let mut bytes = secret.as_bytes().to_vec();
        self.aead
            .seal_in_place_append_tag(
                aead::Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(id.as_bytes()),
                &mut bytes,
            )
            .expect("a secret fits ChaCha20-Poly1305's limits");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&bytes);
        hex::encode(out)
    }

    /// The secret sealed for key `id`, or `None` when `sealed` was not sealed by this
    /// cluster's box for that key (or is not hex).
    #[must_use]
    pub fn open(&self, id: &str, sealed: &str) -> Option<String> {
        let bytes = hex::decode(sealed).ok()?;
        if bytes.len() < NONCE_LEN {
            return None;
        }
        let (nonce, rest) = bytes.split_at(NONCE_LEN);
        let nonce = aead::Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut rest = rest.to_vec();
        let plain = self
            .aead
            .open_in_place(nonce, aead::Aad::from(id.as_bytes()), &mut rest)
            .ok()?;
        String::from_utf8(plain.to_vec()).ok()
    }
}

/// A request of the admin command about accounts (`POST admin/accounts`): one variant
/// per operation, each with exactly the fields it takes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "kebab-case", deny_unknown_fields)]
pub enum AccountRequest {
    /// A new key named `name`: its secret is in the answer only.
    KeyCreate {
        /// A name for people.
        name: String,
        /// The access key id, chosen by the sender ([`new_key_id`]) so that a request
        /// sent again (its answer lost, to another drive) makes no second key: the key
        /// of this id and name is answered again. `None`: the drive chooses.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
    },
    /// Every key.
    KeyList,
    /// One key and its rights.
    KeyInfo {
        /// The access key id.
        id: String,
    },
    /// Deletes a key: requests signed with it are refused from then on.
    KeyDelete {
        /// The access key id.
        id: String,
    },
    /// A new secret for a key; the old one is refused from then on.
    KeyRotate {
        /// The access key id.
        id: String,
    },
    /// Gives `key` the `rights` set in `bucket` (adding to those it has).
    BucketAllow {
        /// The bucket.
        bucket: String,
        /// The access key id.
        key: String,
        /// The rights to give.
        rights: Rights,
    },
    /// Takes the `rights` set from `key` in `bucket`.
    BucketDeny {
        /// The bucket.
        bucket: String,
        /// The access key id.
        key: String,
        /// The rights to take.
        rights: Rights,
    },
    /// A bucket's grants.
    BucketInfo {
        /// The bucket.
        bucket: String,
    },
}

/// The answer to an [`AccountRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "kebab-case")]
pub enum AccountAnswer {
    /// A key made or given a new secret. The secret travels sealed as the table keeps it
    /// ([`AccountKeys::seal`]): only a holder of the cluster secret (the admin command)
    /// opens it.
    NewSecret {
        /// The access key id.
        access_key_id: String,
        /// The key's name.
        name: String,
        /// The secret, sealed.
        sealed_secret: String,
    },
    /// Keys, by id.
    Keys {
        /// Each key.
        keys: Vec<KeyView>,
    },
    /// One key.
    Key(KeyView),
    /// A bucket's grants, by key id.
    Bucket {
        /// The bucket.
        bucket: String,
        /// Rights by access key id (keys deleted since are left out).
        grants: BTreeMap<String, Rights>,
        /// Its policy, as put (`PutBucketPolicy`), if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        policy: Option<String>,
        /// Its objects (counted by listing them).
        #[serde(default)]
        objects: u64,
        /// Their bytes.
        #[serde(default)]
        bytes: u64,
        /// Whether every object was counted: false when the count stopped at its time
        /// limit, or drives could not list ([`BUCKET_COUNT_LIMIT`]).
        #[serde(default)]
        complete: bool,
    },
    /// A change made.
    Done {
        /// What was done, for people.
        message: String,
    },
}

/// A key as the admin command shows it: never its secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyView {
    /// The access key id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Milliseconds since the epoch it was made at.
    pub created_ms: u64,
    /// Milliseconds since the epoch it last signed a request at, on any drive that
    /// answered; `None` if never (to a minute after a drive restarts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_ms: Option<u64>,
    /// Its rights, by bucket.
    pub buckets: BTreeMap<String, Rights>,
}

impl AccountTable {
    /// The rights key `id` has, by bucket.
    #[must_use]
    pub fn buckets_of(&self, id: &str) -> BTreeMap<String, Rights> {
        self.buckets
            .values()
            .filter_map(|e| match &e.entry {
                AccountEntry::Bucket(b) => b.grants.get(id).map(|r| (b.bucket.clone(), *r)),
                _ => None,
            })
            .collect()
    }

    /// Key `id` as the admin command shows it.
    #[must_use]
    pub fn view(&self, id: &str) -> Option<KeyView> {
        let k = self.key(id)?;
        Some(KeyView {
            id: k.id.clone(),
            name: k.name.clone(),
            created_ms: k.created_ms,
            last_used_ms: None,
            buckets: self.buckets_of(id),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(entry: AccountEntry) -> SignedEntry {
        AccountKeys::derive(b"a cluster secret of some length").sign(entry)
    }

    fn key(id: &str, version: u128, deleted: bool) -> SignedEntry {
        signed(AccountEntry::Key(AccessKey {
            id: id.into(),
            name: "n".into(),
            secret: String::new(),
            created_ms: 1,
            deleted,
            version: VersionId(version),
        }))
    }

    fn grants(bucket: &str, id: &str, rights: Rights, version: u128) -> SignedEntry {
        signed(AccountEntry::Bucket(BucketAccess {
            bucket: bucket.into(),
            grants: [(id.to_string(), rights)].into(),
            version: VersionId(version),
        }))
    }

    #[test]
    fn the_newest_entry_wins_in_any_order_and_digests_agree() {
        let entries = [
            key("A", 1, false),
            key("A", 3, true),
            key("A", 2, false),
            key("B", 5, false),
            grants("b1", "B", Rights::ALL, 7),
            grants("b1", "B", Rights::default(), 6),
        ];
        let forward = AccountTable::of(entries.clone());
        let backward = AccountTable::of(entries.iter().rev().cloned());
        assert_eq!(forward.digest(), backward.digest());
        assert_eq!(forward.len(), 3);
        assert!(forward.key("A").is_none(), "the deletion is the newest");
        assert!(forward.get("k/A").is_some(), "and is kept");
        assert_eq!(forward.rights("B", "b1"), Rights::ALL);
        assert_eq!(forward.rights("A", "b1"), Rights::default());
        assert_eq!(forward.rights("B", "other"), Rights::default());
        let mut older = AccountTable::of(entries[..3].iter().cloned());
        assert_ne!(older.digest(), forward.digest());
        for e in forward.entries() {
            older.merge(e);
        }
        assert_eq!(older.digest(), forward.digest());
        assert!(
            !older.merge(key("A", 2, false)),
            "an older copy is not taken"
        );
        assert_eq!(
            AccountTable::default().digest().digest,
            hex::encode([0u8; 32])
        );
    }

    #[test]
    fn two_entries_of_one_version_show_apart_and_settle_alike() {
        let a = grants("b", "A", Rights::ALL, 9);
        let b = grants("b", "B", Rights::ALL, 9);
        let (mut x, mut y) = (AccountTable::of([a.clone()]), AccountTable::of([b.clone()]));
        assert_ne!(x.digest(), y.digest(), "the digest covers the MAC");
        x.merge(b.clone());
        y.merge(a.clone());
        assert_eq!(
            x.digest(),
            y.digest(),
            "both keep the one of the larger MAC"
        );
        let kept = if a.mac > b.mac { "A" } else { "B" };
        assert_eq!(
            x.rights(kept, "b"),
            Rights::default(),
            "no such key, no right"
        );
        assert!(x.bucket("b").unwrap().grants.contains_key(kept));
    }

    #[test]
    fn a_deleted_keys_grants_give_nothing() {
        let t = AccountTable::of([key("A", 2, true), grants("b", "A", Rights::ALL, 1)]);
        assert_eq!(t.rights("A", "b"), Rights::default());
    }

    #[test]
    fn rights_are_given_and_taken_one_by_one() {
        let read = Rights {
            read: true,
            ..Rights::default()
        };
        let rw = read.with(
            Rights {
                write: true,
                ..Rights::default()
            },
            true,
        );
        assert!(rw.allow(Right::Read) && rw.allow(Right::Write) && !rw.allow(Right::Owner));
        let w = rw.with(read, false);
        assert!(!w.allow(Right::Read) && w.allow(Right::Write));
        assert!(w.with(Rights::ALL, false).is_none());
    }

    #[test]
    fn a_sealed_secret_opens_only_in_its_cluster_for_its_key() {
        let b = AccountKeys::derive(b"a cluster secret of some length");
        let secret = new_secret();
        let sealed = b.seal("OEDA", &secret);
        assert!(!sealed.contains(&secret));
        assert_eq!(b.open("OEDA", &sealed).as_deref(), Some(secret.as_str()));
        assert_ne!(b.seal("OEDA", &secret), sealed, "a new nonce each time");
        assert_eq!(b.open("OEDB", &sealed), None, "bound to its key");
        let other = AccountKeys::derive(b"another cluster secret entirely");
        assert_eq!(other.open("OEDA", &sealed), None);
        let mut bad = sealed.clone();
        bad.replace_range(30..32, if &sealed[30..32] == "00" { "01" } else { "00" });
        assert_eq!(b.open("OEDA", &bad), None, "altered");
        assert_eq!(b.open("OEDA", "zz"), None);
        assert_eq!(b.open("OEDA", ""), None);
    }

    #[test]
    fn an_entry_verifies_only_unchanged_and_in_its_cluster() {
        let k = AccountKeys::derive(b"a cluster secret of some length");
        let signed = k.sign(key("A", 1, false).entry);
        assert!(k.verify(&signed));
        let json = serde_json::to_string(&signed).unwrap();
        let back: SignedEntry = serde_json::from_str(&json).unwrap();
        assert!(k.verify(&back), "through JSON");
        let mut changed = signed.clone();
        if let AccountEntry::Key(key) = &mut changed.entry {
            key.deleted = true;
        }
        assert!(!k.verify(&changed));
        let mut bad_mac = signed.clone();
        bad_mac.mac = "00".repeat(32);
        assert!(!k.verify(&bad_mac));
        bad_mac.mac = "not hex".into();
        assert!(!k.verify(&bad_mac));
        let other = AccountKeys::derive(b"another cluster secret entirely");
        assert!(!other.verify(&signed));
    }

    #[test]
    fn admin_requests_are_typed() {
        let r: AccountRequest = serde_json::from_str(
            r#"{"do": "bucket-allow", "bucket": "b", "key": "K", "rights": {"read": true}}"#,
        )
        .unwrap();
        assert_eq!(
            r,
            AccountRequest::BucketAllow {
                bucket: "b".into(),
                key: "K".into(),
                rights: Rights {
                    read: true,
                    ..Rights::default()
                },
            }
        );
        for bad in [
            r#"{"do": "key-create"}"#,
            r#"{"do": "key-create", "name": "n", "extra": 1}"#,
            r#"{"do": "key-drop", "id": "K"}"#,
            r#"{"name": "n"}"#,
        ] {
            assert!(
                serde_json::from_str::<AccountRequest>(bad).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn new_ids_and_secrets_have_their_form() {
        let id = new_key_id();
        assert_eq!(id.len(), 20);
        assert!(id.starts_with("OED"));
        assert!(
            id.bytes()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        );
        assert_ne!(new_key_id(), id);
        assert!(is_key_id(&id));
        for bad in [
            "OEDabcdefghijklmnopq",
            "XYZ12345678901234567",
            "OED123",
            "OED1234567890123456é",
        ] {
            assert!(!is_key_id(bad), "{bad}");
        }
        let s = new_secret();
        assert_eq!(s.len(), 40);
        assert!(s.bytes().all(|c| c.is_ascii_alphanumeric()));
    }
}
