//! This drive's copy of the account table (`oed_model::account`): kept in RocksDB, read
//! from memory. Every request's rights check reads the table in memory; a change is
//! written (synced) before it is in force, so a drive that restarts serves what it had.
//! The store takes no entry whose MAC is not the cluster's, from the network or from its
//! own disk.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

use oed_model::account::{AccountKeys, AccountTable, SignedEntry};
use oed_model::error::{Error, Result};

use crate::Store;

/// The table in memory and the lock that orders its changes.
#[derive(Debug, Default)]
pub(crate) struct Accounts {
    table: RwLock<Arc<AccountTable>>,
    /// Held while a change is merged, written and put in force.
    change: Mutex<()>,
    /// The cluster's keys, once the server gave them ([`Store::open_accounts`]).
    keys: OnceLock<Arc<AccountKeys>>,
    /// When each key was last used here, and when that was last stored.
    used: Mutex<HashMap<String, Used>>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Used {
    ms: u64,
    stored_ms: u64,
}

/// How often a key's last use is stored: its precision after a restart.
const USED_STORE_PERIOD_MS: u64 = 60_000;

impl Store {
    /// Loads the account table from disk, keeping the entries `keys` verify (an entry that
    /// does not is logged and left out), and checks every later change with `keys`. Until
    /// this is called the table is empty and takes no change.
    ///
    /// # Errors
    /// [`Error::Meta`], [`Error::Record`]; `Config` when called a second time.
    pub fn open_accounts(&self, keys: Arc<AccountKeys>) -> Result<()> {
        let _change = self
            .accounts
            .change
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut table = AccountTable::default();
        for e in self.meta().account_entries()? {
            if keys.verify(&e) {
                table.merge(e);
            } else {
                tracing::error!(
                    entry = %e.entry.name(),
                    "an account entry on this drive's disk does not verify (altered, or made \
                     with another cluster secret): left out; the other drives' copy replaces it"
                );
            }
        }
        self.accounts
            .keys
            .set(keys)
            .map_err(|_| Error::Config("the account table was opened twice".into()))?;
        let mut used = self
            .accounts
            .used
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (id, ms) in self.meta().keys_used()? {
            used.insert(id, Used { ms, stored_ms: ms });
        }
        drop(used);
        *self
            .accounts
            .table
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(table);
        Ok(())
    }

    /// The keys given to [`Store::open_accounts`], once it was called.
    #[must_use]
    pub fn account_keys(&self) -> Option<Arc<AccountKeys>> {
        self.accounts.keys.get().cloned()
    }

    /// Notes that key `id` signed a request now, in memory. Returns whether the time is
    /// due to be stored ([`Store::store_key_used`]): at most once a minute per key, so a
    /// restart forgets at most the last minute.
    pub fn note_key_used(&self, id: &str) -> bool {
        let now = oed_model::record::now_ms();
        let mut used = self
            .accounts
            .used
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let u = match used.get_mut(id) {
            Some(u) => u,
            None => used.entry(id.to_owned()).or_default(),
        };
        u.ms = now;
        let due = now.saturating_sub(u.stored_ms) >= USED_STORE_PERIOD_MS;
        if due {
            u.stored_ms = now;
        }
        due
    }

    /// Stores when key `id` was last used here (a synced write: call it off the request's
    /// thread).
    pub fn store_key_used(&self, id: &str) {
        let ms = self
            .accounts
            .used
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .map(|u| u.ms);
        if let Some(ms) = ms {
            let name = format!("{}{id}", crate::meta::KEY_USED_PREFIX);
            if let Err(e) = self.meta().set_state(&name, &ms) {
                tracing::warn!(error = %e, "a key's last use could not be stored");
            }
        }
    }

    /// When each key was last used on this drive (milliseconds since the epoch).
    #[must_use]
    pub fn keys_used(&self) -> HashMap<String, u64> {
        self.accounts
            .used
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(id, u)| (id.clone(), u.ms))
            .collect()
    }

    /// The account table in force here: a snapshot, cheap to take.
    #[must_use]
    pub fn accounts(&self) -> Arc<AccountTable> {
        self.accounts
            .table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Merges `entries` into the table: each is taken when it is newer than the entry of
    /// its name here ([`AccountTable::merge`]). The entries taken are stored (one synced
    /// write) before they are in force; returns them.
    ///
    /// # Errors
    /// `BadRequest` when an entry's MAC is not the cluster's, `Unavailable` before
    /// [`Store::open_accounts`], [`Error::Meta`]: then nothing changed.
    pub fn merge_accounts(&self, entries: Vec<SignedEntry>) -> Result<Vec<SignedEntry>> {
        let Some(keys) = self.accounts.keys.get() else {
            return Err(Error::Unavailable(
                "the account table is not open yet".into(),
            ));
        };
        if let Some(bad) = entries.iter().find(|e| !keys.verify(e)) {
            return Err(Error::BadRequest(format!(
                "account entry {} is not signed with this cluster's key",
                bad.entry.name()
            )));
        }
        let _change = self
            .accounts
            .change
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut table = (*self.accounts()).clone();
        // Only those newer than the table's, and of two of one name the newer.
        let newer: Vec<SignedEntry> = entries
            .into_iter()
            .filter(|e| table.merge(e.clone()))
            .collect();
        if newer.is_empty() {
            return Ok(newer);
        }
        self.meta().put_account_entries(&newer)?;
        *self
            .accounts
            .table
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(table);
        Ok(newer)
    }
}
