//! Changes to a stored version that keep it: its id, data and `ETag` stay, and its
//! record changes on every drive that holds a shard of it ([`Amendment`]): an object's
//! tags (S3's `PutObjectTagging` and `DeleteObjectTagging`).
//!
//! A change is made once it is on a write quorum of the version's drives. Each change
//! carries the id of when it was made and a drive keeps the latest it was sent, so two
//! racing changes end the same on every drive; a reader of the version takes the record
//! changed last ([`super::newest_readable`]). A drive that missed the change gets a heal
//! entry, handed to it when it answers again; healing it brings its record up to date.

use futures_util::future::join_all;

use super::Cluster;
use super::versions::VersionName;
use oed_model::drive::{Amendment, Change, HealEntry};
use oed_model::error::{Error, Missing, Result};
use oed_model::heal::HealCause;
use oed_model::record::ObjectRecord;

/// What one drive answered.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Its record of the version carries the change.
    Carried,
    /// It holds no record of the version under that key.
    Absent,
    /// It did not answer.
    Failed,
}

impl Cluster {
    /// Makes `change` to the version `record` is a record of.
    ///
    /// # Errors
    /// [`Error::NotFound`] when no drive holds the version any more (it was deleted
    /// meanwhile); [`Error::Unavailable`] when fewer than a write quorum of its drives
    /// took the change (those that did keep it).
    pub async fn amend(&self, record: &ObjectRecord, change: Change) -> Result<()> {
        let mut a = Amendment {
            bucket: record.bucket.clone(),
            key: record.key.clone(),
            version_id: record.version_id,
            at: self.new_version_id(),
            change,
        };
        let mut answers = self.amend_on(record, &a).await;
        let carried =
            |answers: &[Answer]| answers.iter().filter(|&&x| x == Answer::Carried).count();
        if carried(&answers) < Self::write_quorum(record.k, record.m)
            && answers.contains(&Answer::Absent)
        {
            // A write of the key may have made the version noncurrent meanwhile (it moved
            // to a key of its own), or a delete of the current one made it current.
            let name = if record.versioned {
                VersionName::Id(record.version_id)
            } else {
                VersionName::Null
            };
            match self
                .version(&record.bucket, record.user_key(), name)
                .await?
            {
                Some(found) if found.record.version_id == record.version_id => {
                    if found.record.key != a.key {
                        a.key.clone_from(&found.record.key);
                        // A drive that took it under the old key keeps it as it moves.
                        let again = self.amend_on(&found.record, &a).await;
                        answers = answers
                            .iter()
                            .zip(again)
                            .map(|(&before, now)| {
                                if before == Answer::Carried {
                                    before
                                } else {
                                    now
                                }
                            })
                            .collect();
                    }
                }
                _ => {
                    return Err(Error::NotFound(Missing::ObjectVersion));
                }
            }
        }
        let done = carried(&answers);
        let quorum = Self::write_quorum(record.k, record.m);
        let entries: Vec<HealEntry> = answers
            .iter()
            .enumerate()
            .filter(|(_, x)| **x == Answer::Failed)
            .map(|(i, _)| {
                let mut r = record.clone();
                r.key.clone_from(&a.key);
                HealEntry::of(
                    &r,
                    i as u16,
                    HealCause::DegradedWrite,
                    (done.saturating_sub(usize::from(record.k))) as u16,
                    self.store.drive_id(),
                )
            })
            .collect();
        // Queued also when the change failed: the drives that took it keep it, and the
        // others come to agree with them.
        if !entries.is_empty()
            && let Err(e) = self.store.queue_heals(&entries)
        {
            tracing::warn!(error = %e, "heal queue");
        }
        if done < quorum {
            return Err(Error::Unavailable(format!(
                "{done} of {} drives holding the version took the change; it needs {quorum}",
                record.drives.len()
            )));
        }
        Ok(())
    }

    /// Sends `a` to each drive `record` names, in its order.
    async fn amend_on(&self, record: &ObjectRecord, a: &Amendment) -> Vec<Answer> {
        let batch = std::slice::from_ref(a);
        join_all(record.drives.iter().map(|id| async move {
            let Some(d) = self.drive(id) else {
                return Answer::Failed;
            };
            match oed_model::drive::within(self.timeout, d.amend(batch)).await {
                Ok(v) if v.first() == Some(&true) => Answer::Carried,
                Ok(_) => Answer::Absent,
                Err(e) => {
                    tracing::warn!(drive = %id, bucket = %a.bucket, key = %a.key, error = %e, "a change of a version was not made there");
                    Answer::Failed
                }
            }
        }))
        .await
    }
}
