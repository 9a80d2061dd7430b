//! Where shard files are made: numbered files in `shards/n/`, written in place, with the
//! directory syncs of concurrent uploads shared.
//!
//! An upload's file gets its number when its first bytes are written: a new file is
//! created at `shards/n/<dir>/<number>.shard` (`<dir>` is the number divided by
//! [`FILES_PER_DIR`], so uploads running together share a directory), or a freed file from
//! the pool ([`super::pool`]) is renamed there. The body is written straight into it and
//! the record names the number ([`oed_model::record::ObjectRecord::file`]), so no rename is
//! left for the end of the upload. What the end still needs is the directory's fsync, so
//! that the new name survives a power cut before the record points to it: [`DirSync`]
//! lets one fsync of a directory serve every upload that named a file in it before that
//! fsync began, so concurrent uploads sync their directory once between them.
//!
//! Numbers only grow while the drive runs, and each start begins past every directory
//! on the disk, so a number is never given twice. A file is registered as being placed
//! ([`Files::placing`]) from before it appears until its record is committed or it is
//! removed, and the sweeps ([`super::Store::sweep_orphans`], [`super::Store::sweep_aged`])
//! leave such files alone.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use oed_model::record::FileId;

/// Numbered files per directory of `shards/n/`: large enough that uploads running
/// together share their directory's fsync, small enough that no directory grows long.
pub(super) const FILES_PER_DIR: u64 = 4096;

/// The numbered shard files of one drive, under `shards/n/`.
#[derive(Debug)]
pub(super) struct Files {
    root: PathBuf,
    alloc: Mutex<Alloc>,
    /// The fsync state of the directories uploads are naming files in now.
    syncs: Mutex<HashMap<u64, Arc<DirSync>>>,
    placements: Mutex<Placements>,
    /// Directory fsyncs run for uploads since the start.
    dir_syncs: Arc<AtomicU64>,
    /// The file system refused `O_DIRECT` (`direct_io`): later uploads do not ask for it.
    direct_refused: AtomicBool,
}

#[derive(Debug)]
struct Alloc {
    /// The next number to give.
    next: u64,
    /// The directory known to exist durably (its name synced into `shards/n/`).
    made: Option<u64>,
}

/// Shard files being placed: each from before it appears under `shards/` until its
/// record is committed (or it is removed), with a count for the same path placed twice
/// at once; and, while an orphan sweep runs, every path placed or in flight since it
/// started. A sweep removes a file only under this lock, after checking both.
#[derive(Debug, Default)]
pub(super) struct Placements {
    in_flight: HashMap<PathBuf, usize>,
    during_sweep: Option<HashSet<PathBuf>>,
}

impl Placements {
    /// Whether the file at `path` is being placed, or was since the sweep running began.
    pub(super) fn protects(&self, path: &Path) -> bool {
        self.in_flight.contains_key(path)
            || self.during_sweep.as_ref().is_some_and(|s| s.contains(path))
    }
}

/// A shard file's placement in progress ([`Files::placing`]); it ends when this is
/// dropped.
#[derive(Debug)]
pub(super) struct Placing {
    files: Arc<Files>,
    path: PathBuf,
}

impl Drop for Placing {
    fn drop(&mut self) {
        count_down(&mut self.files.lock_placements().in_flight, &self.path);
    }
}

/// Takes one off `path`'s count of holders (readers of a file, placements of a path),
/// forgetting the path at zero.
pub(super) fn count_down(counts: &mut HashMap<PathBuf, usize>, path: &Path) {
    if let Some(n) = counts.get_mut(path) {
        *n -= 1;
        if *n == 0 {
            counts.remove(path);
        }
    }
}

impl Files {
    /// The numbered files under `root` (`shards/n`), created durably if missing; numbers
    /// given from now on start after every directory there.
    pub(super) fn open(root: PathBuf) -> std::io::Result<Self> {
        if !root.exists() {
            std::fs::create_dir_all(&root)?;
            if let Some(parent) = root.parent() {
                sync_dir(parent)?;
            }
        }
        let mut last = None;
        for entry in std::fs::read_dir(&root)? {
            let name = entry?.file_name();
            if let Some(d) = name.to_str().and_then(|n| u64::from_str_radix(n, 16).ok()) {
                last = last.max(Some(d));
            }
        }
        let next = last.map_or(0, |d| (d + 1).saturating_mul(FILES_PER_DIR));
        Ok(Self {
            root,
            alloc: Mutex::new(Alloc { next, made: None }),
            syncs: Mutex::new(HashMap::new()),
            placements: Mutex::new(Placements::default()),
            dir_syncs: Arc::new(AtomicU64::new(0)),
            direct_refused: AtomicBool::new(false),
        })
    }

    /// Whether the file system has refused `O_DIRECT` to an upload.
    pub(super) fn direct_refused(&self) -> bool {
        self.direct_refused.load(Ordering::Relaxed)
    }

    /// Notes that the file system refused `O_DIRECT`: later uploads go through the page
    /// cache from the start (and a raw upload is spliced where it can be).
    pub(super) fn refuse_direct(&self) {
        self.direct_refused.store(true, Ordering::Relaxed);
    }

    /// Directory fsyncs run for uploads since the start.
    pub(super) fn dir_syncs(&self) -> u64 {
        self.dir_syncs.load(Ordering::Relaxed)
    }

    /// Where the file numbered `id` is.
    pub(super) fn path(&self, id: FileId) -> PathBuf {
        self.dir(id.0 / FILES_PER_DIR).join(format!("{id}.shard"))
    }

    fn dir(&self, d: u64) -> PathBuf {
        self.root.join(format!("{d:08x}"))
    }

    /// A new number and its path, whose directory exists durably. Blocks: the first
    /// number of a directory makes it (a mkdir and an fsync of `shards/n/`).
    ///
    /// # Errors
    /// The directory could not be made or synced; no number is used up then.
    pub(super) fn allocate(&self) -> std::io::Result<(FileId, PathBuf)> {
        // Numbers and names only: a panic while holding the lock leaves nothing torn.
        let mut a = self.alloc.lock().unwrap_or_else(PoisonError::into_inner);
        let id = FileId(a.next);
        let d = id.0 / FILES_PER_DIR;
        if a.made != Some(d) {
            let dir = self.dir(d);
            match std::fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            // The directory's own name must survive a power cut before any record names
            // a file in it.
            sync_dir(&self.root)?;
            a.made = Some(d);
        }
        a.next += 1;
        Ok((id, self.path(id)))
    }

    /// Registers a shard file about to appear at `path`, until the guard is dropped.
    pub(super) fn placing(self: &Arc<Self>, path: &Path) -> Placing {
        let mut p = self.lock_placements();
        *p.in_flight.entry(path.to_owned()).or_insert(0) += 1;
        if let Some(s) = p.during_sweep.as_mut() {
            s.insert(path.to_owned());
        }
        Placing {
            files: Arc::clone(self),
            path: path.to_owned(),
        }
    }

    /// The placements, for a sweep that checks and removes a file under this lock.
    pub(super) fn lock_placements(&self) -> MutexGuard<'_, Placements> {
        // Counts and names only, as above.
        self.placements
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts remembering every placement (those in flight now, and every one from now
    /// on) until [`Files::end_sweep`].
    pub(super) fn begin_sweep(&self) {
        let mut p = self.lock_placements();
        let now: HashSet<PathBuf> = p.in_flight.keys().cloned().collect();
        p.during_sweep = Some(now);
    }

    /// Stops what [`Files::begin_sweep`] started.
    pub(super) fn end_sweep(&self) {
        self.lock_placements().during_sweep = None;
    }

    /// A ticket for the fsync of file `id`'s directory, taken once its name is there
    /// (it was created or renamed): [`DirTicket::sync`] returns once an fsync of the
    /// directory that began after this call has completed.
    pub(super) fn ticket(&self, id: FileId) -> DirTicket {
        let d = id.0 / FILES_PER_DIR;
        let dir = self.dir(d);
        let sync = {
            let mut syncs = self.syncs.lock().unwrap_or_else(PoisonError::into_inner);
            if syncs.len() > 4 {
                // Directories nobody waits on any more.
                syncs.retain(|_, s| Arc::strong_count(s) > 1);
            }
            Arc::clone(syncs.entry(d).or_default())
        };
        let ticket = sync.ask();
        DirTicket {
            dir,
            sync,
            ticket,
            runs: Arc::clone(&self.dir_syncs),
        }
    }
}

/// The group fsync of one directory: callers ask for an fsync after naming a file in it,
/// and one fsync serves every caller that asked before it began. Whoever finds none
/// running runs it for all; the others wait for it, or for the next.
#[derive(Debug, Default)]
pub(super) struct DirSync {
    state: Mutex<SyncState>,
    done: Condvar,
}

#[derive(Debug, Default)]
struct SyncState {
    /// Tickets given.
    asked: u64,
    /// Every ticket up to this one is covered by a completed fsync.
    synced: u64,
    running: bool,
}

impl DirSync {
    fn lock(&self) -> MutexGuard<'_, SyncState> {
        // Counters only: a panic while holding the lock leaves nothing torn.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn ask(&self) -> u64 {
        let mut s = self.lock();
        s.asked += 1;
        s.asked
    }

    /// Returns once `ticket` is covered, running the fsync with `sync` when none that
    /// could cover it is running. Blocks.
    ///
    /// # Errors
    /// The fsync this caller ran failed (a caller whose fsync failed is never told its
    /// name is durable; one waiting on it runs its own next).
    fn wait(
        &self,
        ticket: u64,
        sync: &mut dyn FnMut() -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let mut s = self.lock();
        loop {
            if s.synced >= ticket {
                return Ok(());
            }
            if s.running {
                s = self.done.wait(s).unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            s.running = true;
            let target = s.asked;
            drop(s);
            let result = sync();
            s = self.lock();
            s.running = false;
            if result.is_ok() {
                s.synced = s.synced.max(target);
            }
            self.done.notify_all();
            result?;
        }
    }
}

/// A file's claim on its directory's fsync ([`Files::ticket`]).
#[derive(Debug)]
pub(super) struct DirTicket {
    dir: PathBuf,
    sync: Arc<DirSync>,
    ticket: u64,
    runs: Arc<AtomicU64>,
}

impl DirTicket {
    /// Returns once the directory's entry for the file is on disk. Blocks.
    ///
    /// # Errors
    /// The directory's fsync failed.
    pub(super) fn sync(&self) -> std::io::Result<()> {
        let dir = &self.dir;
        self.sync.wait(self.ticket, &mut || {
            self.runs.fetch_add(1, Ordering::Relaxed);
            sync_dir(dir)
        })
    }
}

/// fsyncs the directory `dir`: the names made or changed in it survive a power cut.
pub(super) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Renames `from` to `to` unless something is at `to` already (`AlreadyExists` then);
/// where the file system cannot promise that (no `RENAME_NOREPLACE`), it checks first.
pub(super) fn rename_new(from: &Path, to: &Path) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use rustix::fs::{CWD, RenameFlags, renameat_with};
        match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
            Ok(()) => return Ok(()),
            Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::NOSYS => {}
            Err(e) => return Err(e.into()),
        }
    }
    if to.exists() {
        return Err(std::io::ErrorKind::AlreadyExists.into());
    }
    std::fs::rename(from, to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_start_past_every_directory_and_directories_are_made() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("n");
        let files = Files::open(root.clone()).unwrap();
        let (a, pa) = files.allocate().unwrap();
        let (b, _) = files.allocate().unwrap();
        assert_eq!((a, b), (FileId(0), FileId(1)));
        assert!(pa.parent().unwrap().is_dir());
        assert_eq!(pa, root.join("00000000").join("0000000000000000.shard"));
        // A directory left by an earlier run, however far on: the next start begins past it.
        std::fs::create_dir(root.join("0000002a")).unwrap();
        drop(files);
        let files = Files::open(root.clone()).unwrap();
        let (c, pc) = files.allocate().unwrap();
        assert_eq!(c, FileId(43 * FILES_PER_DIR));
        assert!(pc.parent().unwrap().is_dir());
        // Names that are not directories of numbers are ignored.
        std::fs::create_dir(root.join("not-hex")).unwrap();
        assert!(Files::open(root).is_ok());
    }

    #[test]
    fn rename_new_never_replaces_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, b"a").unwrap();
        std::fs::write(&b, b"b").unwrap();
        let e = rename_new(&a, &b).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&b).unwrap(), b"b");
        std::fs::remove_file(&b).unwrap();
        rename_new(&a, &b).unwrap();
        assert_eq!(std::fs::read(&b).unwrap(), b"a");
    }

    /// One fsync serves every ticket asked before it began, and none returns before an
    /// fsync that began after its ticket was asked has completed.
    #[test]
    fn concurrent_tickets_share_fsyncs_and_each_waits_for_one_after_it() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        #[derive(Default)]
        struct Log {
            seq: u64,
            /// When each fsync began, in order (they run one at a time).
            began: Vec<u64>,
        }
        let sync = Arc::new(DirSync::default());
        let log = Arc::new(Mutex::new(Log::default()));
        let completed = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (sync, log, completed) =
                    (Arc::clone(&sync), Arc::clone(&log), Arc::clone(&completed));
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let (t, asked_at) = {
                            let mut l = log.lock().unwrap();
                            l.seq += 1;
                            (sync.ask(), l.seq)
                        };
                        sync.wait(t, &mut || {
                            {
                                let mut l = log.lock().unwrap();
                                l.seq += 1;
                                let now = l.seq;
                                l.began.push(now);
                            }
                            std::thread::sleep(std::time::Duration::from_micros(300));
                            completed.fetch_add(1, Ordering::SeqCst);
                            Ok(())
                        })
                        .unwrap();
                        let done = completed.load(Ordering::SeqCst);
                        let l = log.lock().unwrap();
                        assert!(
                            l.began[..done].iter().any(|&b| b > asked_at),
                            "returned before any fsync that began after its ticket"
                        );
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let runs = log.lock().unwrap().began.len();
        assert!(runs < 400, "{runs} fsyncs for 400 tickets: none was shared");
        assert!(runs > 0);
    }

    #[test]
    fn a_failed_fsync_is_reported_and_the_next_caller_runs_its_own() {
        let sync = DirSync::default();
        let t1 = sync.ask();
        let e = sync
            .wait(t1, &mut || Err(std::io::Error::other("disk gone")))
            .unwrap_err();
        assert_eq!(e.to_string(), "disk gone");
        let mut ran = 0;
        sync.wait(t1, &mut || {
            ran += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(ran, 1, "a failed fsync covered nothing");
        // Covered now: no further fsync for that ticket.
        sync.wait(t1, &mut || panic!("not needed")).unwrap();
    }
}
