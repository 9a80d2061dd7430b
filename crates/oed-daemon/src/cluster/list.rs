//! Listing: a merge of the drives' sorted listings. Each drive lists the records it
//! holds, in key order, a page at a time; the merge walks them together and yields each
//! key once, as the newest version that at least `k` drives hold. A write that did not
//! reach its quorum therefore never shows, and one that did shows even with `m` drives
//! down.

use std::collections::VecDeque;

use futures_util::future::join_all;

use super::Cluster;
use super::drive::DriveError;
use crate::error::{Error, Result};
use crate::store::record::ObjectRecord;

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
    bucket: String,
    cursors: Vec<Cursor>,
}

impl<'a> Merge<'a> {
    /// Starts at the first key `>= start`.
    #[must_use]
    pub fn new(cluster: &'a Cluster, bucket: &str, start: &str) -> Self {
        let mut m = Self {
            cluster,
            bucket: bucket.to_owned(),
            cursors: Vec::new(),
        };
        m.seek(start);
        m
    }

    /// Moves to the first key `>= start`, dropping what was fetched.
    pub fn seek(&mut self, start: &str) {
        let failed: Vec<bool> = if self.cursors.is_empty() {
            vec![false; self.cluster.drives.len()]
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
        let fetches = join_all(
            self.cursors
                .iter_mut()
                .zip(&cluster.drives)
                .filter(|(c, _)| c.buf.is_empty() && !c.failed && c.next.is_some())
                .map(|(c, d)| async move {
                    let start = c.next.clone().unwrap_or_default();
                    let r = tokio::time::timeout(cluster.timeout, d.list(bucket, &start, PAGE))
                        .await
                        .unwrap_or_else(|_| Err(DriveError::Failed("timed out".into())));
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
                        Err(DriveError::NotFound) => c.next = None,
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
        if failed > usize::from(cluster.map.profile.m) {
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
