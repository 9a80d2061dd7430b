//! Versions of a key: finding one by the id clients name it by, deleting one (and making
//! the newest of the rest current when it was the current one), and listing them
//! ([`walk_versions`]).
//!
//! A key's current version is its record under the key; the versions it replaced in a
//! bucket with versioning are kept each under its own internal key
//! ([`oed_model::record::version_key`]), placed with their key, so heal, scrub, drain and
//! rebalance treat them as any object. Drives move a replaced version there as they
//! commit the write that replaces it ([`ObjectRecord::kept_when_replaced_by`]).

use futures_util::future::join_all;

use super::Cluster;
use super::list::{Merge, Rollup, Step, past_prefix};
use oed_model::error::{Error, Result};
use oed_model::record::{
    ObjectRecord, USER_KEYS_START, VERSIONS_PREFIX, VersionId, parse_version_key, version_key,
    versions_of,
};

/// A version as clients name it: S3's `null` version, or an id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VersionName {
    /// The `null` version (written while versioning was never enabled, or suspended).
    Null,
    /// A version of its own.
    Id(VersionId),
}

impl std::str::FromStr for VersionName {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        if s == "null" {
            Ok(Self::Null)
        } else {
            s.parse().map(Self::Id)
        }
    }
}

impl VersionName {
    /// Whether `r` is the version this names.
    #[must_use]
    pub fn names(self, r: &ObjectRecord) -> bool {
        match self {
            Self::Null => !r.versioned,
            Self::Id(v) => r.versioned && r.version_id == v,
        }
    }
}

/// A version found: its record (under the key it is stored at) and whether it is the
/// key's current version.
#[derive(Clone, Debug)]
pub struct Found {
    /// The version's record.
    pub record: ObjectRecord,
    /// Whether it is current.
    pub current: bool,
}

impl Cluster {
    /// The version of `bucket`/`key` that `name` names, if it is stored.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when too many drives fail to answer to be sure.
    pub async fn version(
        &self,
        bucket: &str,
        key: &str,
        name: VersionName,
    ) -> Result<Option<Found>> {
        let current = self.head(bucket, key).await?;
        if let Some(c) = current.filter(|c| name.names(c)) {
            return Ok(Some(Found {
                record: c,
                current: true,
            }));
        }
        let record = match name {
            VersionName::Id(v) => self
                .head(bucket, &version_key(key, v))
                .await?
                .filter(|r| name.names(r)),
            VersionName::Null => {
                let mut merge = Merge::new(self, bucket, &versions_of(key));
                let prefix = versions_of(key);
                let mut found = None;
                while let Some(r) = merge.next().await? {
                    if !r.key.starts_with(&prefix) {
                        break;
                    }
                    if !r.versioned && r.user_key() == key {
                        found = Some(r);
                        break;
                    }
                }
                found
            }
        };
        Ok(record.map(|record| Found {
            record,
            current: false,
        }))
    }

    /// The newest noncurrent version of `bucket`/`key`, if any.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when more than `m` drives cannot list.
    pub async fn newest_noncurrent(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        let prefix = versions_of(key);
        let mut merge = Merge::new(self, bucket, &prefix);
        while let Some(r) = merge.next().await? {
            if !r.key.starts_with(&prefix) {
                break;
            }
            // A longer key whose next character is U+0001 shares the prefix.
            if r.user_key() == key {
                return Ok(Some(r));
            }
        }
        Ok(None)
    }

    /// Deletes one version for good (a client's `DELETE ?versionId=`). When it was the
    /// current one, the newest noncurrent version (if any) becomes current: its drives
    /// are asked to move it back under the key (each does so only where the key has no
    /// current version, so a write that came meanwhile stays current).
    ///
    /// # Errors
    /// [`Error::Unavailable`] when the versions left cannot be listed.
    pub async fn delete_version(&self, found: &Found) -> Result<()> {
        self.delete_record(&found.record).await;
        if !found.current {
            return Ok(());
        }
        // A write that raced the delete may have made it noncurrent on some drives.
        self.delete_record(&found.record.as_noncurrent()).await;
        let (bucket, key) = (&found.record.bucket, &found.record.key);
        let Some(next) = self.newest_noncurrent(bucket, key).await? else {
            return Ok(());
        };
        join_all(next.drives.iter().filter_map(|id| self.drive(id)).map(|d| async move {
            match tokio::time::timeout(self.timeout, d.promote(bucket, key)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(%bucket, %key, error = %e, "a noncurrent version was not made current"),
                Err(_) => tracing::warn!(%bucket, %key, "making a noncurrent version current timed out"),
            }
        }))
        .await;
        Ok(())
    }

    /// After `written`, a `null` version written while versioning is suspended: the
    /// `null` version it replaces goes, also when that was not the current one (S3
    /// keeps one `null` version per key). A current one was replaced by the drives as
    /// they committed.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when the versions cannot be listed.
    pub async fn drop_replaced_nulls(&self, written: &ObjectRecord) -> Result<()> {
        let r = written;
        let prefix = versions_of(&r.key);
        let mut merge = Merge::new(self, &r.bucket, &prefix);
        while let Some(old) = merge.next().await? {
            if !old.key.starts_with(&prefix) {
                break;
            }
            // A version object lock keeps stays (a retention or hold set on a `null`
            // version before the bucket's versioning was suspended).
            if !old.versioned
                && old.version_id < r.version_id
                && old.user_key() == r.key
                && old.locked(oed_model::record::now_ms()).is_none()
            {
                self.delete_version(&Found {
                    record: old,
                    current: false,
                })
                .await?;
            }
        }
        Ok(())
    }

    /// Whether `bucket` holds any noncurrent version.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when more than `m` drives cannot list.
    pub async fn has_noncurrent(&self, bucket: &str) -> Result<bool> {
        let mut merge = Merge::new(self, bucket, VERSIONS_PREFIX);
        Ok(merge
            .next()
            .await?
            .is_some_and(|r| r.key.starts_with(VERSIONS_PREFIX)))
    }
}

/// One entry of a version listing.
#[derive(Clone, Debug)]
pub struct VersionEntry {
    /// The version's record (under the key it is stored at: [`ObjectRecord::user_key`]
    /// is the client's).
    pub record: ObjectRecord,
    /// Whether it is its key's current version.
    pub latest: bool,
}

/// One page of a version listing.
#[derive(Debug, Default)]
pub struct VersionPage {
    /// The versions: by key, and each key's newest first.
    pub versions: Vec<VersionEntry>,
    /// The common prefixes, in order.
    pub prefixes: Vec<String>,
    /// Whether more entries follow.
    pub truncated: bool,
    /// Where the next page starts after: the last key (or common prefix) returned, and
    /// for a version, its id.
    pub last: Option<(String, Option<VersionId>)>,
}

/// Where a listing resumes: after a key's versions up to one of them, or after all of a
/// key's (or a common prefix's).
#[derive(Clone, Debug)]
pub struct After {
    /// The key, or common prefix.
    pub key: String,
    /// The last version returned of it; `None`: all of them were.
    pub version: Option<VersionId>,
}

/// The two walks a version listing merges: current versions (under the keys), and
/// noncurrent ones (under their version keys), each with the next record held back.
struct Sides<'a> {
    current: Merge<'a>,
    noncurrent: Merge<'a>,
    next_current: Option<ObjectRecord>,
    next_noncurrent: Option<ObjectRecord>,
    current_done: bool,
    noncurrent_done: bool,
    prefix: String,
}

impl Sides<'_> {
    fn seek(&mut self, current: &str, noncurrent: &str) {
        self.current.seek(current);
        self.noncurrent.seek(noncurrent);
        self.next_current = None;
        self.next_noncurrent = None;
        self.current_done = false;
        self.noncurrent_done = false;
    }

    async fn fill(&mut self) -> Result<()> {
        while self.next_current.is_none() && !self.current_done {
            match self.current.next().await? {
                Some(r) if r.key.starts_with(&self.prefix) => self.next_current = Some(r),
                Some(r) if r.key.as_str() < self.prefix.as_str() => {}
                _ => self.current_done = true,
            }
        }
        let noncurrent_prefix = format!("{VERSIONS_PREFIX}{}", self.prefix);
        while self.next_noncurrent.is_none() && !self.noncurrent_done {
            match self.noncurrent.next().await? {
                Some(r) if r.key.starts_with(&noncurrent_prefix) => {
                    if parse_version_key(&r.key).is_some() {
                        self.next_noncurrent = Some(r);
                    }
                }
                _ => self.noncurrent_done = true,
            }
        }
        Ok(())
    }

    /// The next entry in listing order, taken: of one key, the current version first.
    async fn take(&mut self) -> Result<Option<VersionEntry>> {
        self.fill().await?;
        let current_first = match (&self.next_current, &self.next_noncurrent) {
            (None, None) => return Ok(None),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(c), Some(n)) => c.key.as_str() <= n.user_key(),
        };
        Ok(if current_first {
            self.next_current.take().map(|record| VersionEntry {
                record,
                latest: true,
            })
        } else {
            self.next_noncurrent.take().map(|record| VersionEntry {
                record,
                latest: false,
            })
        })
    }
}

/// Walks the versions of `bucket`'s keys that start with `prefix`, after `after`, rolling
/// keys that hold `delimiter` past the prefix into common prefixes, until `max` entries:
/// S3's `ListObjectVersions`.
///
/// # Errors
/// [`Error::Unavailable`] when more than `m` drives cannot list.
pub async fn walk_versions(
    cluster: &Cluster,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
    after: Option<&After>,
    max: usize,
) -> Result<VersionPage> {
    let mut rollup = Rollup::new(prefix, delimiter, max);
    let mut current_start = USER_KEYS_START.max(prefix).to_owned();
    let mut noncurrent_start = format!("{VERSIONS_PREFIX}{prefix}");
    if let Some(a) = after {
        let (c, n) = match a.version {
            _ if rollup.is_common_prefix(&a.key) => (
                past_prefix(&a.key),
                format!("{VERSIONS_PREFIX}{}", past_prefix(&a.key)),
            ),
            None => (format!("{}\0", a.key), past_prefix(&versions_of(&a.key))),
            Some(v) => (
                format!("{}\0", a.key),
                format!("{}\0", version_key(&a.key, v)),
            ),
        };
        current_start = current_start.max(c);
        noncurrent_start = noncurrent_start.max(n);
    }
    let mut page = VersionPage::default();
    if max == 0 {
        return Ok(page);
    }
    let mut sides = Sides {
        current: Merge::new(cluster, bucket, &current_start),
        noncurrent: Merge::new(cluster, bucket, &noncurrent_start),
        next_current: None,
        next_noncurrent: None,
        current_done: false,
        noncurrent_done: false,
        prefix: prefix.to_owned(),
    };
    while let Some(entry) = sides.take().await? {
        let key = entry.record.user_key().to_owned();
        match rollup.step(&key) {
            Step::Skip => {}
            Step::Full => {
                page.truncated = true;
                break;
            }
            Step::Prefix(cp) => {
                sides.seek(
                    &past_prefix(&cp),
                    &format!("{VERSIONS_PREFIX}{}", past_prefix(&cp)),
                );
                page.last = Some((cp.clone(), None));
                page.prefixes.push(cp);
            }
            Step::Key => {
                page.last = Some((key, Some(entry.record.version_id)));
                page.versions.push(entry);
            }
        }
    }
    Ok(page)
}
