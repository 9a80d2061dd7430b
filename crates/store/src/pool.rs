//! Freed shard files kept for reuse (`shard_file_pool_bytes`).
//!
//! A shard file that no record names any more (its version replaced or deleted) is
//! renamed into `pool/` instead of being unlinked, while the pool holds less than its
//! limit in bytes and [`MAX_FILES`] files; the next upload renames a pooled file to its
//! own new number ([`super::files`]), overwrites it from its start and cuts it to its new
//! length. The
//! file system then allocates and frees no inode and, for shards of similar sizes, no
//! blocks per write, and the page cache often still holds the file's pages, so an
//! overwrite costs markedly less CPU (`docs/results.md`, "Reused shard files").
//!
//! A file is pooled only while no reader of this process has it open: every read of a
//! shard file registers its path before opening it ([`Pool::reading`]), and a file
//! registered is unlinked instead (its readers keep their inode, as with any unlink).
//! A read that looks its path up after the file went to the pool finds no file, as it
//! would after an unlink. Pooled files hold stale bytes of deleted objects; only this
//! process reads them, and an upload's file is cut to the bytes it wrote. The pool is
//! emptied at each start and whenever free space runs short ([`Pool::drain`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Most files the pool holds, whatever their sizes: a few KiB of memory for their names,
/// however small the shards a workload frees.
const MAX_FILES: usize = 4096;

/// The pool of one drive's freed shard files, in `dir`.
#[derive(Debug)]
pub(super) struct Pool {
    dir: PathBuf,
    /// Most bytes the pooled files may hold together; 0 turns pooling off.
    max_bytes: u64,
    state: Mutex<State>,
    /// Files opened for uploads since the start (for metrics and tests).
    reused: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    /// Pooled files: name (a number) and length; the last freed is reused first.
    files: Vec<(u64, u64)>,
    bytes: u64,
    next: u64,
    /// Shard files open for reading (or about to be), with how many readers each.
    readers: HashMap<PathBuf, usize>,
}

/// A shard file registered as being read; it is not pooled until this is dropped.
#[derive(Debug)]
pub struct Reading {
    pool: Arc<Pool>,
    path: PathBuf,
}

impl Drop for Reading {
    fn drop(&mut self) {
        super::files::count_down(&mut self.pool.lock().readers, &self.path);
    }
}

impl Pool {
    /// The pool in `dir`, emptied: its files' bytes belong to no one after a restart.
    pub(super) fn open(dir: PathBuf, max_bytes: u64) -> std::io::Result<Self> {
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        Ok(Self {
            dir,
            max_bytes,
            state: Mutex::new(State::default()),
            reused: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Counts and names only: a panic while holding the lock leaves nothing torn.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn file(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{id:016x}"))
    }

    /// Registers `path` as being read until the guard is dropped. Call before opening it.
    pub(super) fn reading(self: &Arc<Self>, path: &Path) -> Reading {
        *self.lock().readers.entry(path.to_owned()).or_insert(0) += 1;
        Reading {
            pool: Arc::clone(self),
            path: path.to_owned(),
        }
    }

    /// Frees the shard file at `path`: pooled when it fits and no one reads it, else
    /// unlinked. A file already gone is no error. Blocks (a rename or an unlink).
    pub(super) fn release(&self, path: &Path) {
        if self.max_bytes > 0
            && let Ok(meta) = std::fs::metadata(path)
        {
            let len = meta.len();
            let mut s = self.lock();
            if !s.readers.contains_key(path)
                && s.files.len() < MAX_FILES
                && s.bytes.saturating_add(len) <= self.max_bytes
            {
                let id = s.next;
                s.next += 1;
                // Under the lock: a reader registering now waits, then finds no file.
                match std::fs::rename(path, self.file(id)) {
                    Ok(()) => {
                        s.files.push((id, len));
                        s.bytes += len;
                        return;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                    Err(e) => tracing::warn!(error = %e, path = %path.display(), "shard file pool"),
                }
            }
        }
        super::remove_file_if_exists(path);
    }

    /// A pooled file to overwrite, with its length; it is the caller's from now on (to
    /// place, or to remove), who calls [`Pool::reusing`] once it has opened it.
    pub(super) fn take(&self) -> Option<(PathBuf, u64)> {
        let mut s = self.lock();
        let (id, len) = s.files.pop()?;
        s.bytes -= len;
        Some((self.file(id), len))
    }

    /// Counts a file taken from the pool and opened for an upload.
    pub(super) fn reusing(&self) {
        self.reused.fetch_add(1, Ordering::Relaxed);
    }

    /// Unlinks every pooled file; returns the bytes they held.
    pub(super) fn drain(&self) -> u64 {
        let files = {
            let mut s = self.lock();
            s.bytes = 0;
            std::mem::take(&mut s.files)
        };
        let mut freed = 0;
        for (id, len) in files {
            super::remove_file_if_exists(&self.file(id));
            freed += len;
        }
        freed
    }

    /// Bytes the pooled files hold.
    pub(super) fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// Pooled files opened for uploads since the start.
    pub(super) fn reused(&self) -> u64 {
        self.reused.load(Ordering::Relaxed)
    }
}
