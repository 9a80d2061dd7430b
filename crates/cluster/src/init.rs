//! `oedd cluster init` and `oedd cluster check`: a new cluster's map and secrets made
//! from a list of drive addresses, and a map (with its secret files) checked before it
//! is copied to the drives or after it was edited.
//!
//! `init` writes three files into one directory, every one needed on every drive:
//! `cluster.toml` (the map, epoch 1), `cluster.secret` (the key the drives sign their
//! peer requests with) and `s3.secret` (the S3 secret key of access key `oed`). The
//! secrets are 32 random bytes from the operating system's generator, hex-encoded,
//! written with mode 0600. It refuses to replace files that exist: drives that were
//! given one cluster secret do not talk to drives given another.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use oed_model::error::{Error, Result};
use oed_model::map::{ClusterMap, DriveEntry, DriveState, Profile};

/// The three files `init` writes, by name within its directory.
pub const MAP_FILE: &str = "cluster.toml";
/// The cluster secret's file.
pub const CLUSTER_SECRET_FILE: &str = "cluster.secret";
/// The S3 secret key's file.
pub const S3_SECRET_FILE: &str = "s3.secret";

/// A drive as given on the command line: `[ID=]HOST:PORT[@DOMAIN]`. Without an id the
/// drive is `drive-N`, N its place in the list (from 1).
///
/// # Errors
/// [`Error::Config`] naming the part that is wrong.
pub fn parse_drive(spec: &str, position: usize) -> Result<DriveEntry> {
    let (id, rest) = match spec.split_once('=') {
        Some((id, rest)) => (id.to_owned(), rest),
        None => (format!("drive-{position}"), spec),
    };
    let (address, domain) = match rest.split_once('@') {
        Some((a, d)) if !d.is_empty() => (a, Some(d.to_owned())),
        Some(_) => {
            return Err(Error::Config(format!(
                "--drive {spec:?}: nothing follows '@' (expected [ID=]HOST:PORT[@DOMAIN])"
            )));
        }
        None => (rest, None),
    };
    if address.is_empty() {
        return Err(Error::Config(format!(
            "--drive {spec:?}: no address (expected [ID=]HOST:PORT[@DOMAIN])"
        )));
    }
    Ok(DriveEntry {
        id,
        address: address.to_owned(),
        domain,
        state: DriveState::In,
        capacity_gb: None,
        since: None,
    })
}

/// The profile `init` picks for `n` drives when none is given: two parity shards (one
/// drive may be down, for a restart or an upgrade, while writes still reach their
/// quorum of `k + 1`, and a second failure loses nothing), and at most 8 data shards.
///
/// # Errors
/// [`Error::Config`] for fewer than 3 drives.
pub fn default_profile(n: usize) -> Result<(u16, u16)> {
    if n < 3 {
        return Err(Error::Config(format!(
            "{n} drive(s): a cluster that survives a drive failure needs at least 3; \
             give --k and --m to choose otherwise"
        )));
    }
    let k = (n - 2).min(8);
    Ok((u16::try_from(k).unwrap_or(8), 2))
}

/// The settings of a new map.
#[derive(Clone, Debug)]
pub struct InitOptions {
    /// The map's `cluster_id`.
    pub cluster_id: String,
    /// The drives, in order.
    pub drives: Vec<DriveEntry>,
    /// Data shards; `None` picks with [`default_profile`].
    pub k: Option<u16>,
    /// Parity shards; `None` picks with [`default_profile`].
    pub m: Option<u16>,
    /// Chunk size in bytes.
    pub chunk_size: u32,
    /// Whether the drives serve over TLS.
    pub tls: bool,
}

/// The map `opts` describe, validated.
///
/// # Errors
/// [`Error::Config`] saying what is wrong, as [`ClusterMap::validate`] says it.
pub fn make_map(opts: &InitOptions) -> Result<ClusterMap> {
    let n = u16::try_from(opts.drives.len()).unwrap_or(u16::MAX);
    let (k, m) = match (opts.k, opts.m) {
        (Some(k), Some(m)) => (k, m),
        (None, None) => default_profile(opts.drives.len())?,
        (Some(k), None) => (k, 2),
        (None, Some(m)) => (n.saturating_sub(m).clamp(1, 8), m),
    };
    let map = ClusterMap {
        cluster_id: opts.cluster_id.clone(),
        epoch: 1,
        tls: opts.tls,
        profile: Profile {
            k,
            m,
            chunk_size: opts.chunk_size,
        },
        drives: opts.drives.clone(),
    };
    map.validate().map_err(Error::Config)?;
    Ok(map)
}

/// A secret: 32 random bytes, hex-encoded.
#[must_use]
pub fn new_secret() -> String {
    let mut s = String::with_capacity(64);
    for _ in 0..32 {
        let _ = write!(s, "{:02x}", rand::random::<u8>());
    }
    s
}

/// The map as the file `init` writes: a comment saying what it is, then the TOML.
#[must_use]
pub fn map_text(map: &ClusterMap) -> String {
    let p = map.profile;
    format!(
        "# OED cluster map, made by `oedd cluster init`. The same file goes on every drive\n\
         # (cluster_map in /etc/oed/oedd.toml). Raise the epoch with every change, or use\n\
         # `oedd admin out|in|drain|remove`, which do; `oedd cluster check` checks it.\n\
         # Profile {k}+{m}: each object is cut into {k} data and {m} parity shards on\n\
         # {n} different drives; reads survive {m} drives down, writes {w}.\n{toml}",
        k = p.k,
        m = p.m,
        n = p.k + p.m,
        w = p.m.saturating_sub(1),
        toml = toml::to_string(map).unwrap_or_default()
    )
}

/// Writes the map and two new secrets into `dir` (created when missing); returns the
/// paths written.
///
/// # Errors
/// [`Error::Config`] when one of the files exists already, [`Error::Io`] when writing
/// fails.
pub fn write_files(dir: &Path, map: &ClusterMap) -> Result<Vec<PathBuf>> {
    let files = [MAP_FILE, CLUSTER_SECRET_FILE, S3_SECRET_FILE].map(|f| dir.join(f));
    if let Some(existing) = files.iter().find(|f| f.exists()) {
        return Err(Error::Config(format!(
            "{} exists: init makes a new cluster and would replace its secrets; \
             remove the files or choose another --out",
            existing.display()
        )));
    }
    std::fs::create_dir_all(dir)?;
    std::fs::write(&files[0], map_text(map))?;
    for f in &files[1..] {
        write_private(f, &format!("{}\n", new_secret()))?;
    }
    Ok(files.to_vec())
}

/// Writes `text` to a new file readable by its owner only.
fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    Ok(())
}

/// What `check` found: problems (the map or a secret will not work) and warnings (it
/// works, but should be looked at).
#[derive(Debug, Default)]
pub struct Findings {
    /// Problems: each stops a drive from starting or drives from working together.
    pub problems: Vec<String>,
    /// Warnings.
    pub warnings: Vec<String>,
}

/// Checks the map at `map_path` and, when given, the secret files: that each reads, is
/// long enough, and is not readable by others; and, with `drive_id`, that the map lists
/// that drive.
#[must_use]
pub fn check_files(
    map_path: &Path,
    cluster_secret: Option<&Path>,
    s3_secret: Option<&Path>,
    drive_id: Option<&str>,
) -> (Option<ClusterMap>, Findings) {
    let mut found = Findings::default();
    let map = match ClusterMap::load(map_path) {
        Ok(map) => Some(map),
        Err(e) => {
            found.problems.push(e.to_string());
            None
        }
    };
    if let Some(map) = &map {
        let p = map.profile;
        if p.m == 0 {
            found.warnings.push(format!(
                "profile {}+0: no parity, so a drive that fails loses the data it holds",
                p.k
            ));
        } else if p.m == 1 {
            found.warnings.push(format!(
                "profile {}+1: writes need all {} drives of an object (quorum k + 1), so one drive down (a restart, an upgrade) fails writes that place a shard on it",
                p.k,
                p.k + 1
            ));
        }
        let domains: std::collections::HashSet<&str> =
            map.drives.iter().map(DriveEntry::domain).collect();
        if domains.len() < usize::from(p.k + p.m) && domains.len() > 1 {
            found.warnings.push(format!(
                "{} failure domains for {} shards per object: a domain that fails takes more than one shard of some objects",
                domains.len(),
                p.k + p.m
            ));
        }
        for d in &map.drives {
            if let Some(host) = d.address.rsplit_once(':').map(|(h, _)| h)
                && (host == "0.0.0.0" || host == "[::]")
            {
                found.problems.push(format!(
                    "drive {:?}: address {} is not one other drives can reach (use the drive's own address)",
                    d.id, d.address
                ));
            }
        }
        if let Some(id) = drive_id
            && map.index_of(id).is_none()
        {
            found
                .problems
                .push(format!("drive {id:?} is not in the map"));
        }
    }
    // Read as a drive reads them (the same length rules and messages), then their mode.
    let config = oed_model::config::Config {
        cluster_secret_file: cluster_secret.map(Path::to_path_buf),
        s3_secret_key_file: s3_secret.map(Path::to_path_buf),
        ..oed_model::config::Config::default()
    };
    let read = [
        (
            "cluster secret",
            cluster_secret,
            config.cluster_secret(None).map(drop),
        ),
        ("S3 secret key", s3_secret, config.s3_secret(None).map(drop)),
    ];
    for (what, path, got) in read {
        let Some(path) = path else { continue };
        if let Err(e) = got {
            found.problems.push(e.to_string());
            continue;
        }
        if let Ok(meta) = std::fs::metadata(path)
            && std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o007 != 0
        {
            found.warnings.push(format!(
                "{what} in {} is readable by every user (mode {:o}); chmod 0640 or 0600",
                path.display(),
                std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777
            ));
        }
    }
    (map, found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drives(n: usize) -> Vec<DriveEntry> {
        (1..=n)
            .map(|i| parse_drive(&format!("10.0.0.{i}:9400"), i).unwrap())
            .collect()
    }

    fn opts(n: usize) -> InitOptions {
        InitOptions {
            cluster_id: "lab".into(),
            drives: drives(n),
            k: None,
            m: None,
            chunk_size: oed_ec::layout::DEFAULT_CHUNK_SIZE,
            tls: false,
        }
    }

    #[test]
    fn drive_specs_parse_with_and_without_id_and_domain() {
        let d = parse_drive("10.0.0.7:9400", 3).unwrap();
        assert_eq!(
            (d.id.as_str(), d.address.as_str(), d.domain),
            ("drive-3", "10.0.0.7:9400", None)
        );
        let d = parse_drive("shelf1-a=oed-a.lan:9400@shelf1", 1).unwrap();
        assert_eq!(d.id, "shelf1-a");
        assert_eq!(d.address, "oed-a.lan:9400");
        assert_eq!(d.domain.as_deref(), Some("shelf1"));
        assert!(parse_drive("x=@shelf", 1).is_err());
        assert!(parse_drive("x=h:1@", 1).is_err());
    }

    #[test]
    fn default_profiles_keep_two_parity_shards_and_at_most_eight_data_shards() {
        assert!(default_profile(2).is_err());
        assert_eq!(default_profile(3).unwrap(), (1, 2));
        assert_eq!(default_profile(6).unwrap(), (4, 2));
        assert_eq!(default_profile(20).unwrap(), (8, 2));
        assert_eq!(make_map(&opts(6)).unwrap().profile.k, 4);
    }

    #[test]
    fn a_made_map_is_checked_like_any_other() {
        let mut o = opts(4);
        o.k = Some(4);
        o.m = Some(2);
        let e = make_map(&o).unwrap_err().to_string();
        assert!(e.contains("needs at least 6 drives"), "{e}");
        let mut o = opts(3);
        o.drives[2].address = o.drives[0].address.clone();
        let e = make_map(&o).unwrap_err().to_string();
        assert!(e.contains("used by another drive"), "{e}");
        let mut o = opts(3);
        o.drives[1].id = "bad id".into();
        assert!(make_map(&o).is_err());
    }

    #[test]
    fn init_writes_a_map_that_loads_and_private_secrets_and_never_replaces_them() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let map = make_map(&opts(3)).unwrap();
        let files = write_files(dir.path(), &map).unwrap();
        assert_eq!(files.len(), 3);
        assert_eq!(ClusterMap::load(&files[0]).unwrap(), map);
        let a = std::fs::read_to_string(&files[1]).unwrap();
        let b = std::fs::read_to_string(&files[2]).unwrap();
        assert_eq!(a.trim().len(), 64);
        assert_ne!(a, b, "two secrets, not one");
        for f in &files[1..] {
            assert_eq!(
                std::fs::metadata(f).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
        let e = write_files(dir.path(), &map).unwrap_err().to_string();
        assert!(e.contains("exists"), "{e}");
        assert_eq!(
            std::fs::read_to_string(&files[1]).unwrap(),
            a,
            "secret kept"
        );

        let (got, found) =
            check_files(&files[0], Some(&files[1]), Some(&files[2]), Some("drive-2"));
        assert_eq!(got.unwrap(), map);
        assert!(found.problems.is_empty(), "{found:?}");
        let (_, found) = check_files(&files[0], None, None, Some("drive-9"));
        assert_eq!(found.problems, ["drive \"drive-9\" is not in the map"]);
    }

    #[test]
    fn check_reports_what_would_not_work() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let map_path = dir.path().join("cluster.toml");
        let mut map = make_map(&opts(3)).unwrap();
        map.drives[0].address = "0.0.0.0:9400".into();
        map.profile = Profile {
            k: 2,
            m: 1,
            chunk_size: map.profile.chunk_size,
        };
        std::fs::write(&map_path, toml::to_string(&map).unwrap()).unwrap();
        let short = dir.path().join("short");
        std::fs::write(&short, "abc\n").unwrap();
        let open = dir.path().join("open");
        std::fs::write(&open, "0123456789abcdef0123\n").unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
        let (_, found) = check_files(&map_path, Some(&short), Some(&open), None);
        assert_eq!(found.problems.len(), 2, "{found:?}");
        assert!(
            found.problems[0].contains("not one other drives can reach"),
            "{found:?}"
        );
        assert!(found.problems[1].contains("at least 16"), "{found:?}");
        assert!(
            found.warnings.iter().any(|w| w.contains("2+1")),
            "{found:?}"
        );
        assert!(
            found
                .warnings
                .iter()
                .any(|w| w.contains("readable by every user")),
            "{found:?}"
        );

        std::fs::write(&map_path, "cluster_id = \"x\"\n").unwrap();
        let (got, found) = check_files(&map_path, None, None, None);
        assert!(got.is_none());
        assert!(found.problems[0].contains("missing field"), "{found:?}");
    }
}
