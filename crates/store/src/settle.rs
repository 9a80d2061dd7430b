//! What a coordinator asks of a shard already stored: a client write settled
//! ([`Store::settle`]) and a shard moved to another drive ([`Store::relocate`]).

use crate::Store;
use oed_model::drive::Settlement;
use oed_model::error::Result;

impl Store {
    /// Settles a client write of this drive's: see [`oed_model::drive::Settlement`]. Returns
    /// whether anything changed here.
    ///
    /// # Errors
    /// [`Error::Meta`], [`Error::Record`].
    pub fn settle(&self, s: &Settlement) -> Result<bool> {
        let _guard = self.lock_for(&s.bucket, &s.key);
        let kept = self.meta.kept(&s.bucket, &s.key)?;
        // A stored write with nothing kept (the common case: the scrub asks for every
        // readable object) needs nothing more read.
        if s.stored && kept.is_none() {
            return Ok(false);
        }
        let current = self.meta.object(&s.bucket, &s.key)?;
        if s.stored {
            // The write reached its quorum: what it replaced is not needed any more.
            let Some(k) = kept else { return Ok(false) };
            if k.record.version_id >= s.version_id
                || current.is_none_or(|c| c.version_id < s.version_id)
            {
                return Ok(false);
            }
            self.meta.drop_kept(&s.bucket, &s.key)?;
            self.release_kept(&k.record)?;
            return Ok(true);
        }
        // The write failed: its version goes, and the one it replaced comes back.
        match (current, kept) {
            (Some(c), kept) if c.version_id == s.version_id => {
                // A kept version whose file is gone (its drop was not synced, and power
                // was lost after the file went) is not brought back as a record without
                // its shard: the key's record goes, and heal rebuilds what is current.
                let restorable = match &kept {
                    Some(k) if k.inline.is_none() => {
                        self.record_path(&k.record).try_exists()?.then_some(k)
                    }
                    k => k.as_ref(),
                };
                if let Some(k) = restorable {
                    self.meta.restore_kept(k)?;
                } else {
                    if kept.is_some() {
                        tracing::warn!(bucket = %s.bucket, key = %s.key, "a kept version's file is gone: not restored");
                    }
                    // With the kept entry, in one synced write.
                    self.meta.delete_object(&s.bucket, &s.key)?;
                }
                self.pool.release(&self.record_path(&c));
                Ok(true)
            }
            // A newer write has replaced it since, and keeps it: it is dropped.
            (_, Some(k)) if k.record.version_id == s.version_id => {
                self.meta.drop_kept(&s.bucket, &s.key)?;
                self.release_kept(&k.record)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Frees the shard file of a kept version whose entry was dropped, unless it is
    /// stored as a noncurrent version too (its file is that record's).
    pub(crate) fn release_kept(&self, kept: &oed_model::record::ObjectRecord) -> Result<()> {
        if !self.meta.is_noncurrent(kept)? {
            self.pool.release(&self.record_path(kept));
        }
        Ok(())
    }

    /// Whether version `version` of `bucket`/`key` is kept here for the settlement of the
    /// write that replaced it.
    ///
    /// # Errors
    /// [`Error::Meta`], [`Error::Record`].
    pub fn keeps(
        &self,
        bucket: &str,
        key: &str,
        version: oed_model::record::VersionId,
    ) -> Result<bool> {
        Ok(self
            .meta
            .kept(bucket, key)?
            .is_some_and(|k| k.record.version_id == version))
    }

    /// Makes the newest noncurrent version of `bucket`/`key` held here current, when no
    /// version of the key is current here (a client deleted the current one), under the
    /// key's commit lock. Returns the version made current.
    ///
    /// # Errors
    /// [`Error::Meta`], [`Error::Record`].
    pub fn promote(&self, bucket: &str, key: &str) -> Result<Option<oed_model::record::VersionId>> {
        let _guard = self.lock_for(bucket, key);
        Ok(self.meta.promote(bucket, key)?.map(|r| r.version_id))
    }

    /// Applies one [`oed_model::drive::Amendment`] to the record of its version here,
    /// under the key's commit lock. Returns whether the record here carries it now.
    ///
    /// # Errors
    /// [`Error::Meta`], [`Error::Record`].
    pub fn amend(&self, a: &oed_model::drive::Amendment) -> Result<bool> {
        let _guard = self.lock_for(&a.bucket, &a.key);
        let Some(mut r) = self.meta.object(&a.bucket, &a.key)? else {
            return Ok(false);
        };
        if r.version_id != a.version_id {
            return Ok(false);
        }
        if a.apply(&mut r) {
            self.meta.rewrite_record(&r)?;
        }
        Ok(true)
    }

    /// Applies one [`oed_model::drive::Relocation`] to the records here, under the key's
    /// commit lock (so it cannot undo a newer version committed meanwhile). Returns
    /// whether they name the new drive now: `false` when no record here is of that
    /// version.
    ///
    /// # Errors
    /// [`Error::Meta`].
    pub fn relocate(&self, m: &oed_model::drive::Relocation) -> Result<bool> {
        let i = usize::from(m.shard_index);
        let moved = |drives: &mut Vec<String>| -> Option<bool> {
            match drives.get(i) {
                Some(d) if *d == m.to => Some(false),
                Some(d) if *d == m.from => {
                    drives[i].clone_from(&m.to);
                    Some(true)
                }
                _ => None,
            }
        };
        let mut found = false;
        {
            let _guard = self.lock_for(&m.bucket, &m.key);
            if let Some(mut r) = self.meta.object(&m.bucket, &m.key)?
                && r.version_id == m.version_id
                && let Some(changed) = moved(&mut r.drives)
            {
                found = true;
                if changed {
                    self.meta.rewrite_record(&r)?;
                }
            }
        }
        if let Some(parent) = &m.parent {
            let _guard = self.lock_for(&m.bucket, parent);
            if let Some(mut r) = self.meta.object(&m.bucket, parent)? {
                let mut changed = false;
                for p in r
                    .parts
                    .iter_mut()
                    .filter(|p| p.key == m.key && p.version_id == m.version_id)
                {
                    if let Some(c) = moved(&mut p.drives) {
                        found = true;
                        changed |= c;
                    }
                }
                if changed {
                    self.meta.rewrite_record(&r)?;
                }
            }
        }
        Ok(found)
    }
}
