//! Listing: a merge of the drives' sorted listings. Each drive lists the records it
//! holds, in key order, a page at a time; the merge walks them together and yields each
//! key once, as the newest version that at least `k` drives hold. A write that did not
//! reach its quorum therefore never shows, and one that did shows even with `m` drives
//! down. [`walk`] cuts that merge into the pages S3 listings show: a prefix, a
//! delimiter's common prefixes, a marker, a page size.

use std::collections::VecDeque;

use futures_util::future::join_all;

use super::Cluster;
use oed_model::error::{Error, Result};
use oed_model::record::ObjectRecord;

/// Records fetched from a drive at a time.
const PAGE: usize = 256;

struct Cursor {
    buf: VecDeque<ObjectRecord>,
    /// Where the next page starts; `None` once the drive has no more.
    next: Option<String>,
    failed: bool,
}

/// A walk over the visible objects of a bucket, in key order.
pub struct Merge<'a> {
    cluster: &'a Cluster,
    /// The map the walk started with: its drives are the cursors'.
    drives: std::sync::Arc<super::MapView>,
    bucket: String,
    cursors: Vec<Cursor>,
}

impl<'a> Merge<'a> {
    /// Starts at the first key `>= start`.
    #[must_use]
    pub fn new(cluster: &'a Cluster, bucket: &str, start: &str) -> Self {
        let mut m = Self {
            cluster,
            drives: cluster.map(),
            bucket: bucket.to_owned(),
            cursors: Vec::new(),
        };
        m.seek(start);
        m
    }

    /// Moves to the first key `>= start`, dropping what was fetched.
    pub fn seek(&mut self, start: &str) {
        let failed: Vec<bool> = if self.cursors.is_empty() {
            vec![false; self.drives.all().len()]
        } else {
            self.cursors.iter().map(|c| c.failed).collect()
        };
        self.cursors = failed
            .into_iter()
            .map(|failed| Cursor {
                buf: VecDeque::new(),
                next: Some(start.to_owned()),
                failed,
            })
            .collect();
    }

    async fn refill(&mut self) -> Result<()> {
        let cluster = self.cluster;
        let bucket = &self.bucket;
        let drives = self.drives.clone();
        let fetches = join_all(
            self.cursors
                .iter_mut()
                .zip(drives.all())
                .filter(|(c, _)| c.buf.is_empty() && !c.failed && c.next.is_some())
                .map(|(c, d)| async move {
                    let start = c.next.clone().unwrap_or_default();
                    let r = oed_model::drive::within(
                        cluster.timeout,
                        d.list_objects(bucket, &start, PAGE),
                    )
                    .await;
                    match r {
                        Ok(page) => {
                            c.next = if page.len() < PAGE {
                                None
                            } else {
                                // Keys hold no NUL, so this is the smallest key after the last.
                                page.last().map(|r| format!("{}\0", r.key))
                            };
                            c.buf.extend(page);
                        }
                        // A drive that missed the bucket's creation has nothing of it.
                        Err(e) if e.is_not_found() => c.next = None,
                        Err(e) => {
                            tracing::warn!(bucket = %bucket, error = %e, "a drive could not list");
                            c.failed = true;
                        }
                    }
                }),
        )
        .await;
        drop(fetches);
        let failed = self.cursors.iter().filter(|c| c.failed).count();
        if failed > usize::from(cluster.map().profile.m) {
            return Err(Error::Unavailable(format!(
                "{failed} drives cannot list; a listing could miss objects"
            )));
        }
        Ok(())
    }

    /// The next visible object.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when more than `m` drives cannot list.
    pub async fn next(&mut self) -> Result<Option<ObjectRecord>> {
        loop {
            self.refill().await?;
            let Some(min) = self
                .cursors
                .iter()
                .filter_map(|c| c.buf.front())
                .map(|r| r.key.clone())
                .min()
            else {
                return Ok(None);
            };
            let mut same = Vec::new();
            for c in &mut self.cursors {
                if c.buf.front().is_some_and(|r| r.key == min) {
                    same.extend(c.buf.pop_front());
                }
            }
            if let Some(r) = super::newest_readable(&same) {
                return Ok(Some(r));
            }
        }
    }
}

/// One page of a listing.
#[derive(Debug, Default)]
pub struct Page {
    /// The objects, in key order.
    pub contents: Vec<ObjectRecord>,
    /// The common prefixes, in order.
    pub prefixes: Vec<String>,
    /// Whether more entries follow.
    pub truncated: bool,
    /// The last key or common prefix returned: where the next page starts after.
    pub last: Option<String>,
}

/// A key after which every key with prefix `p` has been passed (keys hold at most 1024
/// bytes, so a run of the largest character this long is past all of them in practice;
/// a key that still sorts before it is folded into the same prefix again).
pub(crate) fn past_prefix(p: &str) -> String {
    format!("{p}\u{10FFFF}")
}

/// How a listing rolls keys into common prefixes and counts its entries against `max`.
pub(crate) struct Rollup<'a> {
    prefix: &'a str,
    delimiter: Option<&'a str>,
    max: usize,
    count: usize,
    last_prefix: Option<String>,
}

/// What [`Rollup::step`] makes of a key.
pub(crate) enum Step {
    /// Its common prefix was just listed: nothing to add.
    Skip,
    /// The page is full: more entries follow.
    Full,
    /// A new common prefix, to list (and skip the rest of).
    Prefix(String),
    /// The key itself, to list.
    Key,
}

impl<'a> Rollup<'a> {
    /// For keys under `prefix`, rolled up at `delimiter` (an empty one is none), `max`
    /// entries a page.
    pub(crate) fn new(prefix: &'a str, delimiter: Option<&'a str>, max: usize) -> Self {
        Self {
            prefix,
            delimiter: delimiter.filter(|d| !d.is_empty()),
            max,
            count: 0,
            last_prefix: None,
        }
    }

    /// Whether a marker is a common prefix (a listing after it skips all its keys).
    pub(crate) fn is_common_prefix(&self, marker: &str) -> bool {
        match (self.delimiter, marker.strip_prefix(self.prefix)) {
            (Some(d), Some(rest)) => {
                rest.ends_with(d) && rest.find(d) == Some(rest.len() - d.len())
            }
            _ => false,
        }
    }

    /// What `key` (which starts with the prefix) adds to the page.
    pub(crate) fn step(&mut self, key: &str) -> Step {
        let cp = self.delimiter.and_then(|d| {
            key[self.prefix.len()..]
                .find(d)
                .map(|pos| key[..self.prefix.len() + pos + d.len()].to_owned())
        });
        if cp.is_some() && cp == self.last_prefix {
            return Step::Skip;
        }
        if self.count == self.max {
            return Step::Full;
        }
        self.count += 1;
        match cp {
            Some(cp) => {
                self.last_prefix = Some(cp.clone());
                Step::Prefix(cp)
            }
            None => Step::Key,
        }
    }
}

/// Walks keys of `bucket` that start with `prefix` (and are not before `first_key`),
/// after `after`, rolling keys that hold `delimiter` past the prefix into common
/// prefixes, until `max` entries.
///
/// # Errors
/// [`Error::Unavailable`] when more than `m` drives cannot list.
pub async fn walk(
    cluster: &Cluster,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
    after: Option<&str>,
    max: usize,
    first_key: &str,
) -> Result<Page> {
    let mut rollup = Rollup::new(prefix, delimiter, max);
    let mut start = first_key.max(prefix).to_owned();
    if let Some(a) = after {
        // A marker that is a common prefix skips all its keys; a key, just itself.
        let skip = if rollup.is_common_prefix(a) {
            past_prefix(a)
        } else {
            format!("{a}\0")
        };
        start = start.max(skip);
    }
    let mut page = Page::default();
    if max == 0 {
        return Ok(page);
    }
    let mut merge = Merge::new(cluster, bucket, &start);
    while let Some(rec) = merge.next().await? {
        if !rec.key.starts_with(prefix) {
            if rec.key.as_str() > prefix {
                break;
            }
            continue;
        }
        // A key whose current version is a delete marker is not listed.
        if rec.delete_marker {
            continue;
        }
        match rollup.step(&rec.key) {
            Step::Skip => {}
            Step::Full => {
                page.truncated = true;
                break;
            }
            Step::Prefix(cp) => {
                merge.seek(&past_prefix(&cp));
                page.last = Some(cp.clone());
                page.prefixes.push(cp);
            }
            Step::Key => {
                page.last = Some(rec.key.clone());
                page.contents.push(rec);
            }
        }
    }
    Ok(page)
}
