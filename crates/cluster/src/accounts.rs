//! The account table across the cluster's drives (`oed_model::account`; `docs/access.md`).
//!
//! A change is made on one drive: its entries get version ids newer than the ones they
//! replace, are signed, stored there, and sent to every other drive at once, each
//! bounded by the peer timeout. Every drive also compares its table's digest with each
//! other drive's, at start and every [`SYNC_PERIOD`], and where they differ the two
//! exchange what each has newer: a drive that was down or missed a change learns it, and
//! one that has entries the other lacks gives them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use oed_model::account::{
    AccessKey, AccountAnswer, AccountEntry, AccountKeys, AccountRequest, AccountTable,
    BUCKET_COUNT_LIMIT, BucketAccess, KeyView, Rights, SignedEntry, is_key_id, new_key_id,
    new_secret,
};
use oed_model::drive::{Drive, DriveError, ErrorCode, MAX_BATCH, within};
use oed_model::error::{Error, Result};
use oed_model::record::{VersionId, now_ms};

use crate::Cluster;

/// How often a drive compares its account table with the others'.
pub const SYNC_PERIOD: Duration = Duration::from_secs(2);

/// What a change or a comparison did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccountSync {
    /// Other drives that answered.
    pub answered: usize,
    /// Other drives that did not (down, or timed out).
    pub unreachable: usize,
    /// Entries this drive took from others.
    pub taken: usize,
    /// Entries other drives took from this one.
    pub given: usize,
}

impl Cluster {
    /// The account table in force on this drive.
    #[must_use]
    pub fn accounts(&self) -> Arc<AccountTable> {
        self.store.accounts()
    }

    /// The keys that sign entries and seal secrets.
    ///
    /// # Errors
    /// `Unavailable` before the store's account table is open.
    pub fn account_keys(&self) -> Result<Arc<AccountKeys>> {
        self.store
            .account_keys()
            .ok_or_else(|| Error::Unavailable("the account table is not open yet".into()))
    }

    /// Makes a change: each entry gets a version id newer than this drive's time and than
    /// the entry it replaces, is signed, stored here (in force here when this returns)
    /// and sent to every other drive of the map. Returns the entries as stored and what
    /// the others did: a drive that did not answer learns the change at its next
    /// comparison ([`SYNC_PERIOD`]) or start.
    ///
    /// # Errors
    /// Those of storing the change here; then nothing changed anywhere.
    pub async fn change_accounts(
        &self,
        entries: Vec<AccountEntry>,
    ) -> Result<(Vec<SignedEntry>, AccountSync)> {
        let keys = self.account_keys()?;
        let table = self.accounts();
        let signed: Vec<SignedEntry> = entries
            .into_iter()
            .map(|mut e| {
                let mut version = self.new_version_id();
                if let Some(old) = table.get(&e.name()) {
                    // Past an entry made ahead of this drive's clock: its time, and new
                    // random low bits, so that two drives doing so at once differ.
                    let old = old.entry.version().0;
                    if version.0 <= old {
                        version = VersionId(
                            (old & !u128::from(u64::MAX))
                                + (1 << 64)
                                + u128::from(rand::random::<u64>()),
                        );
                    }
                }
                e.set_version(version);
                keys.sign(e)
            })
            .collect();
        let store = self.store.clone();
        let mine = signed.clone();
        tokio::task::spawn_blocking(move || store.merge_accounts(mine))
            .await
            .map_err(|e| Error::Unavailable(format!("the account change stopped: {e}")))??;
        let map = self.map();
        let others = map
            .all()
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != map.local);
        let results = join_all(others.map(|(_, d)| give(d.as_ref(), &signed, self.timeout))).await;
        let mut sync = AccountSync::default();
        for r in results {
            match r {
                Ok(n) => {
                    sync.answered += 1;
                    sync.given += n;
                }
                Err(_) => sync.unreachable += 1,
            }
        }
        Ok((signed, sync))
    }

    /// Compares this drive's account table with every other drive's and, where they
    /// differ, takes what the other has newer and gives it what this one has newer.
    /// A drive that does not answer is counted and left for the next comparison.
    pub async fn sync_accounts(&self) -> AccountSync {
        let map = self.map();
        let others = map
            .all()
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != map.local)
            .map(|(_, d)| self.sync_with(d.clone()));
        let mut sync = AccountSync::default();
        for r in join_all(others).await {
            match r {
                Ok((taken, given)) => {
                    sync.answered += 1;
                    sync.taken += taken;
                    sync.given += given;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "a drive did not compare account tables");
                    sync.unreachable += 1;
                }
            }
        }
        if sync.taken > 0 || sync.given > 0 {
            tracing::info!(
                taken = sync.taken,
                given = sync.given,
                "account tables compared: entries exchanged"
            );
        }
        sync
    }

    /// One comparison with `drive`: returns the entries taken from it and given to it.
    async fn sync_with(
        &self,
        drive: Arc<dyn Drive>,
    ) -> std::result::Result<(usize, usize), DriveError> {
        let theirs = within(self.timeout, drive.account_digest()).await?;
        if theirs == self.accounts().digest() {
            return Ok((0, 0));
        }
        let entries = within(self.timeout, drive.account_entries()).await?;
        let keys = self
            .account_keys()
            .map_err(|e| DriveError::unreachable(e.to_string()))?;
        let (good, bad): (Vec<_>, Vec<_>) = entries.into_iter().partition(|e| keys.verify(e));
        if !bad.is_empty() {
            tracing::warn!(
                refused = bad.len(),
                "account entries from another drive do not verify: refused"
            );
        }
        let theirs = AccountTable::of(good.iter().cloned());
        let store = self.store.clone();
        let taken = tokio::task::spawn_blocking(move || store.merge_accounts(good))
            .await
            .map_err(|e| DriveError::unreachable(e.to_string()))?
            .map_err(DriveError::from)?
            .len();
        let newer: Vec<SignedEntry> = self
            .accounts()
            .entries()
            .into_iter()
            .filter(|e| theirs.is_newer(e))
            .collect();
        let given = give(drive.as_ref(), &newer, self.timeout).await?;
        Ok((taken, given))
    }
}

impl Cluster {
    /// Notes that key `id` signed a request on this drive (for `oedd admin key info`); the
    /// time is stored at most once a minute, off the request's thread.
    pub fn note_key_used(&self, id: &str) {
        if self.store.note_key_used(id) {
            let (store, id) = (self.store.clone(), id.to_owned());
            tokio::task::spawn_blocking(move || store.store_key_used(&id));
        }
    }

    /// When each key last signed a request, the latest of every drive that answers.
    async fn keys_used(&self) -> HashMap<String, u64> {
        let map = self.map();
        let asks = map
            .all()
            .iter()
            .map(|d| within(self.timeout, d.keys_used()));
        let mut out: HashMap<String, u64> = HashMap::new();
        for answer in join_all(asks).await.into_iter().flatten() {
            for (id, ms) in answer {
                let e = out.entry(id).or_default();
                *e = (*e).max(ms);
            }
        }
        out
    }

    /// Carries out an admin request about accounts (`oedd admin key ...`, `oedd admin
    /// bucket ...`). Every change is logged on this drive (never a secret) and spread as
    /// [`Cluster::change_accounts`] spreads it.
    ///
    /// # Errors
    /// `BadRequest` naming what is wrong (an unknown key or bucket, no right named, an
    /// empty name); those of [`Cluster::change_accounts`].
    pub async fn administer(&self, req: AccountRequest) -> Result<AccountAnswer> {
        // One at a time on this drive: each reads the table, then changes an entry of it
        // (two grants in one bucket made at once would otherwise keep only one). The
        // admin command sends every request to the same drive while it is up.
        static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let _one = ONE_AT_A_TIME.lock().await;
        if !matches!(
            req,
            AccountRequest::KeyList
                | AccountRequest::KeyInfo { .. }
                | AccountRequest::BucketInfo { .. }
        ) {
            // A change starts from the newest entries any drive has, not from this drive's
            // copy alone (it may have missed changes while it was down): otherwise the
            // change, newer, would undo them everywhere.
            self.sync_accounts().await;
        }
        let table = self.accounts();
        let known = |id: &str| {
            table
                .key(id)
                .cloned()
                .ok_or_else(|| Error::BadRequest(format!("no access key {id:?}")))
        };
        match req {
            AccountRequest::KeyCreate { name, id } => self.create_key(&table, &name, id).await,
            AccountRequest::KeyList => {
                let used = self.keys_used().await;
                Ok(AccountAnswer::Keys {
                    keys: table
                        .keys()
                        .iter()
                        .filter_map(|k| table.view(&k.id))
                        .map(|v| with_use(v, &used))
                        .collect(),
                })
            }
            AccountRequest::KeyInfo { id } => {
                known(&id)?;
                let used = self.keys_used().await;
                table
                    .view(&id)
                    .map(|v| AccountAnswer::Key(with_use(v, &used)))
                    .ok_or_else(|| Error::BadRequest(format!("no access key {id:?}")))
            }
            AccountRequest::KeyDelete { id } => {
                let mut key = known(&id)?;
                key.deleted = true;
                key.secret.clear();
                tracing::info!(key = %id, "access key deleted");
                self.change_accounts(vec![AccountEntry::Key(key)]).await?;
                Ok(AccountAnswer::Done {
                    message: format!("access key {id} deleted"),
                })
            }
            AccountRequest::KeyRotate { id } => {
                let mut key = known(&id)?;
                key.secret = self.account_keys()?.seal(&id, &new_secret());
                let answer = AccountAnswer::NewSecret {
                    access_key_id: key.id.clone(),
                    name: key.name.clone(),
                    sealed_secret: key.secret.clone(),
                };
                tracing::info!(key = %id, "access key given a new secret");
                self.change_accounts(vec![AccountEntry::Key(key)]).await?;
                Ok(answer)
            }
            AccountRequest::BucketAllow {
                bucket,
                key,
                rights,
            }
            | AccountRequest::BucketDeny {
                bucket,
                key,
                rights,
            } if rights.is_none() => {
                let _ = (bucket, key);
                Err(Error::BadRequest(
                    "name at least one right: read, write or owner".into(),
                ))
            }
            AccountRequest::BucketAllow {
                bucket,
                key,
                rights,
            } => self.grant(&table, &bucket, &key, rights, true).await,
            AccountRequest::BucketDeny {
                bucket,
                key,
                rights,
            } => self.grant(&table, &bucket, &key, rights, false).await,
            AccountRequest::BucketInfo { bucket } => self.bucket_info(&table, bucket).await,
        }
    }

    /// The grants of `bucket` (of keys not deleted).
    async fn bucket_info(&self, table: &AccountTable, bucket: String) -> Result<AccountAnswer> {
        if !self.bucket_exists(&bucket).await? {
            return Err(Error::BadRequest(format!("no bucket {bucket:?}")));
        }
        let grants = table
            .bucket(&bucket)
            .map(|b| {
                b.grants
                    .iter()
                    .filter(|(id, _)| table.key(id).is_some())
                    .map(|(id, r)| (id.clone(), *r))
                    .collect()
            })
            .unwrap_or_default();
        let (objects, bytes, complete) = self.count_bucket(&bucket).await;
        Ok(AccountAnswer::Bucket {
            policy: table.policy_text(&bucket).map(str::to_owned),
            bucket,
            grants,
            objects,
            bytes,
            complete,
        })
    }

    /// The objects of `bucket` and their bytes, as listed, for at most
    /// [`BUCKET_COUNT_LIMIT`]; whether that was all of them.
    async fn count_bucket(&self, bucket: &str) -> (u64, u64, bool) {
        let mut merge = crate::list::Merge::new(self, bucket, "");
        let (mut objects, mut bytes) = (0u64, 0u64);
        let counted = tokio::time::timeout(BUCKET_COUNT_LIMIT, async {
            while let Some(r) = merge.next().await? {
                objects += 1;
                bytes += r.size;
            }
            Ok::<_, Error>(())
        })
        .await;
        (objects, bytes, matches!(counted, Ok(Ok(()))))
    }

    /// A new key named `name`, with a new secret.
    async fn create_key(
        &self,
        table: &AccountTable,
        name: &str,
        id: Option<String>,
    ) -> Result<AccountAnswer> {
        let name = name.trim().to_owned();
        if name.is_empty() || name.len() > 256 {
            return Err(Error::BadRequest(
                "a key's name must have 1 to 256 characters".into(),
            ));
        }
        let id = match id {
            None => new_key_id(),
            Some(id) if !is_key_id(&id) => {
                return Err(Error::BadRequest(format!(
                    "{id:?} is not an access key id (OED and 17 upper-case letters and digits)"
                )));
            }
            Some(id) => {
                if let Some(old) = table.get(&format!("k/{id}")) {
                    return match &old.entry {
                        // The same request sent again: the same key.
                        AccountEntry::Key(k) if !k.deleted && k.name == name => {
                            Ok(AccountAnswer::NewSecret {
                                access_key_id: k.id.clone(),
                                name: k.name.clone(),
                                sealed_secret: k.secret.clone(),
                            })
                        }
                        _ => Err(Error::BadRequest(format!("access key id {id} is taken"))),
                    };
                }
                id
            }
        };
        let key = AccessKey {
            secret: self.account_keys()?.seal(&id, &new_secret()),
            id,
            name,
            created_ms: now_ms(),
            deleted: false,
            version: VersionId(0),
        };
        let answer = AccountAnswer::NewSecret {
            access_key_id: key.id.clone(),
            name: key.name.clone(),
            sealed_secret: key.secret.clone(),
        };
        tracing::info!(key = %key.id, name = %key.name, "access key created");
        self.change_accounts(vec![AccountEntry::Key(key)]).await?;
        Ok(answer)
    }

    /// Gives (`give`) or takes `rights` of `key` in `bucket`.
    async fn grant(
        &self,
        table: &AccountTable,
        bucket: &str,
        key: &str,
        rights: Rights,
        give: bool,
    ) -> Result<AccountAnswer> {
        if table.key(key).is_none() {
            return Err(Error::BadRequest(format!("no access key {key:?}")));
        }
        if !self.bucket_exists(bucket).await? {
            return Err(Error::BadRequest(format!("no bucket {bucket:?}")));
        }
        let mut entry = table
            .bucket(bucket)
            .cloned()
            .unwrap_or_else(|| BucketAccess {
                bucket: bucket.to_owned(),
                grants: std::collections::BTreeMap::default(),
                version: VersionId(0),
            });
        let now = entry
            .grants
            .get(key)
            .copied()
            .unwrap_or_default()
            .with(rights, give);
        if now.is_none() {
            entry.grants.remove(key);
        } else {
            entry.grants.insert(key.to_owned(), now);
        }
        tracing::info!(
            bucket,
            key,
            read = now.read,
            write = now.write,
            owner = now.owner,
            "bucket rights changed"
        );
        self.change_accounts(vec![AccountEntry::Bucket(entry)])
            .await?;
        Ok(AccountAnswer::Done {
            message: format!(
                "key {key} in bucket {bucket}: read {}, write {}, owner {}",
                now.read, now.write, now.owner
            ),
        })
    }
}

/// `view` with the time its key was last used.
fn with_use(mut view: KeyView, used: &HashMap<String, u64>) -> KeyView {
    view.last_used_ms = used.get(&view.id).copied();
    view
}

/// Sends `entries` to `drive` in batches; returns how many it took.
async fn give(
    drive: &dyn Drive,
    entries: &[SignedEntry],
    timeout: Duration,
) -> std::result::Result<usize, DriveError> {
    // Keys and grants first, policies and bucket settings in batches of their own: a
    // drive of a version before them refuses a batch that holds one as a whole (it
    // cannot decode it), and still takes the rest.
    let (policies, rest): (Vec<&SignedEntry>, Vec<&SignedEntry>) = entries
        .iter()
        .partition(|e| matches!(e.entry, AccountEntry::Policy(_) | AccountEntry::Settings(_)));
    let mut taken = 0;
    for batch in rest.chunks(MAX_BATCH) {
        let batch: Vec<SignedEntry> = batch.iter().map(|e| (*e).clone()).collect();
        taken += within(timeout, drive.merge_accounts(&batch)).await?;
    }
    for batch in policies.chunks(MAX_BATCH) {
        let batch: Vec<SignedEntry> = batch.iter().map(|e| (*e).clone()).collect();
        match within(timeout, drive.merge_accounts(&batch)).await {
            Ok(n) => taken += n,
            Err(e) if e.code == ErrorCode::BadRequest => {
                tracing::debug!(error = %e, "a drive refused bucket policies (a version before them?)");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(taken)
}
