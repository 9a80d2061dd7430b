//! Gives back pages nothing will read again: the executable's dynamic relocations once
//! they are applied, and once a drive is ready, what only starting it used.
//!
//! A position-independent executable carries a table of the addresses the dynamic loader
//! must adjust at start (`.rela.dyn`; `.rel.dyn` on 32-bit ARM). The loader reads every
//! entry, so every page of the table is mapped into the process, and it stays counted in
//! the drive's resident memory for the process's life although nothing reads it again:
//! 0.8 MiB on x86_64 (`docs/drive.md`, "The relocation table"). The pages
//! are clean pages of the file: dropping them from this process (`MADV_DONTNEED`) loses
//! nothing, and a read of them (none is expected) would map them from the file again.
//!
//! Linkers can pack the table instead (`-z pack-relative-relocs`), but a binary so linked
//! needs glibc 2.36, which would drop Ubuntu 22.04 from what the packages run on.
//!
//! The same holds for the code and read-only data that only starting ran: parsing the
//! settings, opening RocksDB, binding the listeners. Once a drive is ready, those pages of
//! the executable and of the shared libraries stay mapped and counted, because nothing
//! unmaps them, and with them every page of the page cache that the kernel mapped
//! beside a touched one (fault-around, 64 KiB). [`release_startup_pages`] unmaps the
//! pages of the loaded objects' read-only segments that nothing has written; what the
//! drive runs after that maps again from the page cache on its first touch
//! (`docs/drive.md`, "The pages of starting").

use std::ops::Range;

/// `DT_*` tags of the dynamic section: the end, and the table with its size in bytes
/// (`RELA` on 64-bit targets and aarch64, `REL` on 32-bit ARM).
const DT_NULL: usize = 0;
const DT_RELA: usize = 7;
const DT_RELASZ: usize = 8;
const DT_REL: usize = 17;
const DT_RELSZ: usize = 18;
/// Program header types, and the flag of a writable segment.
const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_PHDR: u32 = 6;
const PF_W: u32 = 2;

/// One program header, as this process's word size has it.
#[cfg(target_pointer_width = "64")]
type Phdr = libc::Elf64_Phdr;
#[cfg(target_pointer_width = "32")]
type Phdr = libc::Elf32_Phdr;

/// Where this process's executable keeps its dynamic relocations, in this process's
/// addresses: `None` when it has none (a static or non-PIE build without them), when
/// they do not lie inside one read-only segment (pages that something may have written
/// must not be dropped), or when its headers cannot be read. Read from the file's own
/// dynamic section (the loader may have rewritten the one in memory).
#[must_use]
pub fn relocation_table() -> Option<Range<usize>> {
    let phdrs = program_headers()?;
    let phdr = phdrs.iter().find(|p| p.p_type == PT_PHDR)?;
    let bias = (phdrs.as_ptr() as usize).checked_sub(phdr.p_vaddr as usize)?;
    let dynamic = phdrs.iter().find(|p| p.p_type == PT_DYNAMIC)?;
    let mut bytes = vec![0u8; usize::try_from(dynamic.p_filesz).ok()?];
    {
        use std::os::unix::fs::FileExt as _;
        let exe = std::fs::File::open("/proc/self/exe").ok()?;
        let at = usize::try_from(dynamic.p_offset).ok()?;
        exe.read_exact_at(&mut bytes, at as u64).ok()?;
    }
    let words = bytes
        .chunks_exact(size_of::<usize>())
        .map(|b| usize::from_ne_bytes(b.try_into().unwrap_or_default()));
    let (mut table, mut size) = (None, None);
    for (tag, value) in dynamic_entries(words) {
        match tag {
            DT_RELA | DT_REL => table = Some(value),
            DT_RELASZ | DT_RELSZ => size = Some(value),
            _ => {}
        }
    }
    let (table, size) = (table?, size?);
    let end = table.checked_add(size)?;
    phdrs.iter().find(|p| {
        let (from, len) = (p.p_vaddr as usize, p.p_memsz as usize);
        p.p_type == PT_LOAD
            && p.p_flags & PF_W == 0
            && from <= table
            && from.checked_add(len).is_some_and(|to| end <= to)
    })?;
    Some(bias.checked_add(table)?..bias.checked_add(end)?)
}

/// This process's program headers, where the loader mapped them (`AT_PHDR`).
#[expect(
    unsafe_code,
    reason = "the program headers are read where the kernel says they are mapped"
)]
fn program_headers() -> Option<&'static [Phdr]> {
    // SAFETY: getauxval only reads the auxiliary vector the kernel gave the process.
    let (at, count) = unsafe {
        (
            libc::getauxval(libc::AT_PHDR),
            libc::getauxval(libc::AT_PHNUM),
        )
    };
    if at == 0 || count == 0 {
        return None;
    }
    // SAFETY: AT_PHDR is the address of the executable's AT_PHNUM program headers, mapped
    // read-only for the life of the process (part of its first loaded segment) and
    // aligned for them; nothing writes them.
    Some(unsafe {
        std::slice::from_raw_parts(at as usize as *const Phdr, usize::try_from(count).ok()?)
    })
}

/// Drops the whole pages of the relocation table from this process; returns the bytes
/// dropped (0 when there is no table or no whole page of it). Call it once at start: the
/// loader has applied the table before `main`.
#[expect(
    unsafe_code,
    reason = "madvise on pages of the executable's own read-only mapping"
)]
#[must_use]
pub fn release_relocation_pages() -> usize {
    let Some(table) = relocation_table() else {
        return 0;
    };
    let page = rustix::param::page_size();
    let start = table.start.next_multiple_of(page);
    let end = table.end / page * page;
    if end <= start {
        return 0;
    }
    // SAFETY: start..end lies inside the relocation table, which the loader mapped
    // read-only from the executable file and has finished with. MADV_DONTNEED on such a
    // private, unmodified file mapping only unmaps the pages from this process; the
    // mapping stays, and a later read would map the same bytes from the file again.
    let done =
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
    if done == 0 { end - start } else { 0 }
}

/// How long after it is ready a drive gives back its pages a second time: the first
/// seconds of serving run work of their own once (a cluster's drives connect to their
/// peers, the repair and metering loops make their first rounds), which left a drive of a
/// cluster with several times the code it runs idle after that mapped (`docs/results.md`,
/// "Memory", "Idle").
pub const SETTLE: std::time::Duration = std::time::Duration::from_secs(30);

/// One mapping of `/proc/self/smaps` that may be given back: private, not writable,
/// backed by a file, with no page of its own in memory or in swap (`Anonymous: 0 kB` and
/// `Swap: 0 kB`: nothing has written to it, not the loader's relocations either; a
/// written page that was swapped out counts under `Swap` alone) and none locked.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CleanMapping {
    range: Range<usize>,
}

/// The mappings of an smaps listing that [`release_startup_pages`] may give back: none
/// when no mapping of the listing has an anonymous page, since a running process always
/// has some (its heap, its stacks): such a listing is not the kernel's count, and
/// `Anonymous: 0 kB` in it says nothing of what was written.
fn clean_mappings(smaps: &str) -> Vec<CleanMapping> {
    struct Open {
        range: Range<usize>,
        eligible: bool,
        anonymous_kib: Option<usize>,
        swap_kib: Option<usize>,
        locked_kib: Option<usize>,
    }
    let mut found = Vec::new();
    let mut any_anonymous = false;
    let mut open: Option<Open> = None;
    let mut close = |m: Option<Open>| {
        if let Some(m) = m
            && m.eligible
            && m.anonymous_kib == Some(0)
            && m.swap_kib == Some(0)
            && m.locked_kib == Some(0)
        {
            found.push(CleanMapping { range: m.range });
        }
    };
    for line in smaps.lines() {
        let mut words = line.split_ascii_whitespace();
        let Some(first) = words.next() else {
            continue;
        };
        if let Some(field) = first.strip_suffix(':') {
            let kib = || words.clone().next().and_then(|v| v.parse::<usize>().ok());
            if let Some(m) = open.as_mut() {
                match field {
                    "Anonymous" => {
                        m.anonymous_kib = kib();
                        any_anonymous |= m.anonymous_kib.is_some_and(|k| k > 0);
                    }
                    "Swap" => m.swap_kib = kib(),
                    "Locked" => m.locked_kib = kib(),
                    _ => {}
                }
            }
            continue;
        }
        // A mapping's first line: `start-end perms offset dev inode [path]`. A line that
        // is neither that nor a field ends the mapping before it, and the fields after it
        // belong to no mapping.
        let header = first.split_once('-').and_then(|(from, to)| {
            Some(usize::from_str_radix(from, 16).ok()?..usize::from_str_radix(to, 16).ok()?)
        });
        let Some(range) = header else {
            close(open.take());
            continue;
        };
        let perms = words.next().unwrap_or("").as_bytes();
        let path = words.nth(3).unwrap_or("");
        // `[vdso]`, `[heap]` and anonymous mappings have no path from the root; a deleted
        // file's mapping says so after its path, and is left alone.
        let eligible = perms.len() == 4
            && perms[0] == b'r'
            && perms[1] == b'-'
            && perms[3] == b'p'
            && path.starts_with('/')
            && !line.ends_with("(deleted)");
        close(open.replace(Open {
            range,
            eligible,
            anonymous_kib: None,
            swap_kib: None,
            locked_kib: None,
        }));
    }
    close(open);
    if !any_anonymous {
        return Vec::new();
    }
    found
}

/// `PT_GNU_RELRO`: the part of a writable segment the loader relocates and then makes
/// read-only. `DT_TEXTREL` and `DF_TEXTREL` in `DT_FLAGS`: an object whose read-only
/// segments the loader writes.
const PT_GNU_RELRO: u32 = 0x6474_e552;
const DT_TEXTREL: usize = 22;
const DT_FLAGS: usize = 30;
const DF_TEXTREL: usize = 0x4;

/// Whole pages of the read-only segments of the objects loaded when first called (the
/// executable and the libraries it was linked with; never unloaded): `PT_LOAD` segments
/// without write permission, less any `PT_GNU_RELRO` range, of objects without text
/// relocations. Later calls return the same list: nothing loaded after (a `dlopen`, which
/// could also be unloaded) is ever given back.
fn loaded_read_only_segments() -> &'static [Range<usize>] {
    static SEGMENTS: std::sync::OnceLock<Vec<Range<usize>>> = std::sync::OnceLock::new();
    SEGMENTS.get_or_init(read_only_segments_now)
}

#[expect(
    unsafe_code,
    reason = "dl_iterate_phdr hands each loaded object's program headers to a callback"
)]
fn read_only_segments_now() -> Vec<Range<usize>> {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid `dl_phdr_info` for the call, and `data`
        // is the `Vec` the caller lent it, used by nothing else meanwhile.
        let (info, out) = unsafe { (&*info, &mut *data.cast::<Vec<Range<usize>>>()) };
        if info.dlpi_phdr.is_null() {
            return 0;
        }
        // SAFETY: `dlpi_phdr` points at the object's `dlpi_phnum` program headers, mapped
        // for as long as the object stays loaded (it is, during the callback).
        let phdrs: &[Phdr] =
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
        let base = info.dlpi_addr as usize;
        // SAFETY: as above; the dynamic section lies in the object's loaded segments.
        if unsafe { has_text_relocations(base, phdrs) } {
            return 0;
        }
        out.extend(segments_of(base, phdrs));
        0
    }
    let mut out: Vec<Range<usize>> = Vec::new();
    // SAFETY: `each` only reads what it is given and writes `out`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each), (&raw mut out).cast()) };
    out
}

/// Whether the object at `base` with these program headers asks the loader to write its
/// read-only segments (`DT_TEXTREL`, or `DF_TEXTREL` in `DT_FLAGS`).
///
/// # Safety
/// `base` and `phdrs` must be those of an object loaded in this process.
#[expect(unsafe_code, reason = "reads the loaded object's dynamic section")]
unsafe fn has_text_relocations(base: usize, phdrs: &[Phdr]) -> bool {
    let Some(dynamic) = phdrs.iter().find(|p| p.p_type == PT_DYNAMIC) else {
        return false;
    };
    let at = base.wrapping_add(dynamic.p_vaddr as usize) as *const usize;
    let words = (0..dynamic.p_memsz as usize / size_of::<usize>())
        // SAFETY: the dynamic section is `p_memsz` bytes of (tag, value) words, mapped
        // and readable while the object is loaded (the caller's contract).
        .map(|i| unsafe { *at.add(i) });
    dynamic_entries(words)
        .any(|(tag, value)| tag == DT_TEXTREL || (tag == DT_FLAGS && value & DF_TEXTREL != 0))
}

/// The (tag, value) entries of a dynamic section, given as its words, up to `DT_NULL`.
fn dynamic_entries(mut words: impl Iterator<Item = usize>) -> impl Iterator<Item = (usize, usize)> {
    std::iter::from_fn(move || Some((words.next()?, words.next()?)))
        .take_while(|&(tag, _)| tag != DT_NULL)
}

/// The whole pages of an object's read-only `PT_LOAD` segments, less its `PT_GNU_RELRO`
/// range rounded out to whole pages.
fn segments_of(base: usize, phdrs: &[Phdr]) -> Vec<Range<usize>> {
    let page = rustix::param::page_size();
    let span = |p: &Phdr| {
        let from = base.wrapping_add(p.p_vaddr as usize);
        from..from.wrapping_add(p.p_memsz as usize)
    };
    let relro: Vec<Range<usize>> = phdrs
        .iter()
        .filter(|p| p.p_type == PT_GNU_RELRO)
        .map(|p| {
            let r = span(p);
            r.start / page * page..r.end.next_multiple_of(page)
        })
        .collect();
    let mut out = Vec::new();
    for p in phdrs
        .iter()
        .filter(|p| p.p_type == PT_LOAD && p.p_flags & PF_W == 0)
    {
        let r = span(p);
        let whole = r.start.next_multiple_of(page)..r.end / page * page;
        let mut pieces = Vec::from([whole]);
        for cut in &relro {
            pieces = pieces
                .into_iter()
                .flat_map(|piece| {
                    [
                        piece.start..piece.end.min(cut.start),
                        piece.start.max(cut.end)..piece.end,
                    ]
                })
                .filter(|piece| piece.start < piece.end)
                .collect();
        }
        out.extend(pieces);
    }
    out
}

/// The ranges to give back: where a clean mapping and a read-only segment overlap.
fn advisable(mappings: &[CleanMapping], segments: &[Range<usize>]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    for m in mappings {
        for s in segments {
            let (from, to) = (m.range.start.max(s.start), m.range.end.min(s.end));
            if from < to {
                out.push(from..to);
            }
        }
    }
    out
}

/// Unmaps the pages of this process's loaded objects' read-only segments (the code and
/// read-only data of the executable and of the libraries it was linked with) and returns
/// how many KiB of them it asked to unmap. Call it once the drive has started: what it
/// runs from then on maps again from the page cache when first touched, so what stays
/// counted is the code a serving drive uses, not what starting it used.
///
/// A range is given back only where two sources agree that nothing has written it: the
/// objects' own program headers (a read-only segment, not the relocated read-only data,
/// of an object without text relocations) and the kernel's `/proc/self/smaps` (a private,
/// read-only file mapping with no page in memory or in swap that is not the file's, none
/// locked). The kernel may take such pages back at any moment under memory pressure;
/// this does only that, now.
#[expect(
    unsafe_code,
    reason = "madvise on this process's own clean, read-only file mappings"
)]
#[must_use]
pub fn release_startup_pages() -> usize {
    let segments = loaded_read_only_segments();
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return 0;
    };
    let mut released = 0;
    for range in advisable(&clean_mappings(&smaps), segments) {
        // SAFETY: the range lies in a read-only segment of an object loaded before the
        // first call and never unloaded, outside its relocated part, in an object the
        // loader does not write; it also lies in a private mapping of a file that the
        // kernel counted without write permission and with no page of its own, in memory
        // or in swap. Every page of it is the file's own bytes, so MADV_DONTNEED only
        // unmaps them from this process: the mapping stays, and the next read of any of
        // them maps the same bytes from the file again.
        let done = unsafe {
            libc::madvise(
                range.start as *mut libc::c_void,
                range.len(),
                libc::MADV_DONTNEED,
            )
        };
        if done == 0 {
            released += range.len() / 1024;
        }
    }
    released
}

/// What a drive does once it is ready to serve: gives back the pages that starting
/// mapped ([`release_startup_pages`]) now, and once more after [`SETTLE`] of serving
/// unless `shutdown` comes first, each logged with what it gave back. Call it from the
/// runtime; the second call runs off its workers (a read of `/proc` and a few system
/// calls).
pub fn release_now_and_after_settling(shutdown: tokio_util::sync::CancellationToken) {
    let kib = release_startup_pages();
    tracing::debug!(kib, "gave back the pages that starting mapped");
    tokio::spawn(async move {
        tokio::select! {
            () = shutdown.cancelled() => {}
            () = tokio::time::sleep(SETTLE) => {
                if let Ok(kib) = tokio::task::spawn_blocking(release_startup_pages).await {
                    tracing::debug!(kib, "gave back the pages of the first seconds of serving");
                }
            }
        }
    });
}

/// How many pages of `range` this process has mapped (`/proc/self/pagemap`'s present
/// bit): what the tests of this module measure.
///
/// # Panics
/// When `/proc/self/pagemap` cannot be read.
#[doc(hidden)]
#[must_use]
pub fn present_pages(range: &Range<usize>) -> usize {
    use std::os::unix::fs::FileExt as _;
    let page = rustix::param::page_size();
    let (first, last) = (range.start / page, range.end.div_ceil(page));
    let mut words = vec![0u8; (last - first) * 8];
    let map = std::fs::File::open("/proc/self/pagemap").expect("pagemap");
    map.read_exact_at(&mut words, (first * 8) as u64)
        .expect("read pagemap");
    words
        .chunks_exact(8)
        .filter(|w| u64::from_ne_bytes((*w).try_into().expect("8 bytes")) >> 63 == 1)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[expect(unsafe_code, reason = "reads the relocation table's pages to map them")]
    fn the_loaders_pages_of_relocations_are_given_back() {
        // The test binary is position-independent, with a table of tens of KiB at least.
        let table = relocation_table().expect("a PIE test binary has dynamic relocations");
        let page = rustix::param::page_size();
        assert!(table.len() > 4 * page, "table of {} bytes", table.len());
        let inner = table.start.next_multiple_of(page)..table.end / page * page;
        // Read one byte of each page, so that all are mapped whatever ran before.
        for at in inner.clone().step_by(page) {
            // SAFETY: `at` lies in the table, in a read-only mapping of the executable
            // that stays for the life of the process.
            unsafe { std::ptr::read_volatile(at as *const u8) };
        }
        assert_eq!(
            present_pages(&inner),
            inner.len() / page,
            "the table is mapped"
        );
        let released = release_relocation_pages();
        assert_eq!(released, inner.len());
        assert_eq!(
            present_pages(&inner),
            0,
            "no page of the table is left mapped"
        );
    }

    /// An excerpt of a drive's smaps: its first read-only segment, its code, its
    /// relocated read-only data, its data, libc's code, a library whose relocated pages
    /// were swapped out, a shared read-only mapping, a locked mapping, a deleted file's,
    /// a path with spaces, the heap and the vDSO.
    const SMAPS: &str = "\
55c0b0e54000-55c0b0fb0000 r--p 00000000 fe:00 123 /usr/bin/oedd
Size:               1392 kB
Rss:                1284 kB
Anonymous:             0 kB
Swap:                  0 kB
Locked:                0 kB
55c0b143b000-55c0b2589000 r-xp 005e6000 fe:00 123 /usr/bin/oedd
Size:              17720 kB
Rss:                9684 kB
Anonymous:             0 kB
Swap:                  0 kB
Locked:                0 kB
55c0b2589000-55c0b2618000 r--p 01733000 fe:00 123 /usr/bin/oedd
Rss:                 564 kB
Anonymous:           564 kB
Swap:                  0 kB
Locked:                0 kB
55c0b2618000-55c0b2620000 rw-p 017c2000 fe:00 123 /usr/bin/oedd
Rss:                  32 kB
Anonymous:             0 kB
Swap:                  0 kB
Locked:                0 kB
7f2b92764000-7f2b928ba000 r-xp 00026000 fe:00 77 /usr/lib/x86_64-linux-gnu/libc.so.6
Rss:                1136 kB
Anonymous:             0 kB
Swap:                  0 kB
Locked:                0 kB
7f2b92900000-7f2b92901000 r--p 00020000 fe:00 80 /usr/lib/x86_64-linux-gnu/libgcc_s.so.1
Rss:                   0 kB
Anonymous:             0 kB
Swap:                  4 kB
Locked:                0 kB
7f2b92910000-7f2b92920000 r--s 00000000 fe:00 81 /dev/shm/shared
Rss:                  64 kB
Anonymous:             0 kB
Swap:                  0 kB
Locked:                0 kB
7f2b92a00000-7f2b92a10000 r-xp 00000000 fe:00 78 /usr/lib/libpinned.so
Rss:                  64 kB
Anonymous:             0 kB
Swap:                  0 kB
Locked:               64 kB
7f2b92b00000-7f2b92b10000 r-xp 00000000 fe:00 79 /usr/lib/libgone.so (deleted)
Rss:                  64 kB
Anonymous:             0 kB
Swap:                  0 kB
Locked:                0 kB
7f2b92c00000-7f2b92c10000 r-xp 00000000 fe:00 82 /opt/my drive/lib x.so
Rss:                  64 kB
Anonymous:             0 kB
Swap:                  0 kB
Locked:                0 kB
55c0d0dcc000-55c0d0f4a000 rw-p 00000000 00:00 0                          [heap]
Rss:                1496 kB
Anonymous:          1496 kB
Swap:                  0 kB
Locked:                0 kB
7ffde67fe000-7ffde6800000 r-xp 00000000 00:00 0                          [vdso]
Rss:                   8 kB
Anonymous:             0 kB
Swap:                  0 kB
Locked:                0 kB
";

    #[test]
    fn only_clean_read_only_file_mappings_are_picked() {
        let picked = clean_mappings(SMAPS);
        let ranges: Vec<Range<usize>> = picked.iter().map(|m| m.range.clone()).collect();
        assert_eq!(
            ranges,
            vec![
                0x55c0_b0e5_4000..0x55c0_b0fb_0000,
                0x55c0_b143_b000..0x55c0_b258_9000,
                0x7f2b_9276_4000..0x7f2b_928b_a000,
                0x7f2b_92c0_0000..0x7f2b_92c1_0000,
            ]
        );
        // A listing in which nothing is anonymous is not the kernel's: nothing picked.
        let faked = SMAPS
            .replace("Anonymous:           564 kB", "Anonymous:             0 kB")
            .replace("Anonymous:          1496 kB", "Anonymous:             0 kB");
        assert!(clean_mappings(&faked).is_empty());
        // A listing cut short of a mapping's fields never picks that mapping.
        let cut = format!("{SMAPS}7f00-8f00 r-xp 0 fe:00 1 /lib/x.so\nRss: 4 kB\n");
        assert_eq!(clean_mappings(&cut), picked);
        // A line that is no mapping's first line ends the mapping before it: the fields
        // after it are nobody's, and cannot make the relocated data look clean.
        let garbled = SMAPS.replace(
            "Anonymous:           564 kB\n",
            "Anonymous:           564 kB\nzz-yy r--p 0 fe:00 1 /x\nAnonymous:             0 kB\n",
        );
        assert_eq!(clean_mappings(&garbled), picked);
        let relro_first = SMAPS.replacen(
            "55c0b2589000-55c0b2618000 r--p 01733000 fe:00 123 /usr/bin/oedd\nRss:                 564 kB\nAnonymous:           564 kB\n",
            "55c0b2589000-55c0b2618000 r--p 01733000 fe:00 123 /usr/bin/oedd\nnot a field or a header\nAnonymous:             0 kB\n",
            1,
        );
        assert!(
            !clean_mappings(&relro_first)
                .iter()
                .any(|m| m.range.start == 0x55c0_b258_9000),
            "fields after a garbled line count for no mapping"
        );
    }

    /// A program header of `kind` with `flags` over `vaddr..vaddr + size`.
    fn phdr(kind: u32, flags: u32, vaddr: usize, size: usize) -> Phdr {
        Phdr {
            p_type: kind,
            p_flags: flags,
            p_offset: 0,
            p_vaddr: vaddr as _,
            p_paddr: 0,
            p_filesz: 0,
            p_memsz: size as _,
            p_align: 0,
        }
    }

    #[test]
    fn read_only_segments_leave_out_the_relocated_part_and_partial_pages() {
        let page = rustix::param::page_size();
        let base = 0x1000 * page;
        let phdrs = [
            // Read-only data from the first byte, ending mid-page.
            phdr(PT_LOAD, 4, 0, 3 * page + 100),
            // Code, page-aligned.
            phdr(PT_LOAD, 5, 4 * page, 8 * page),
            // Read-only after relocation: the start of a writable segment.
            phdr(PT_LOAD, 6, 13 * page, 4 * page),
            phdr(PT_GNU_RELRO, 4, 13 * page, 2 * page + 8),
            // A read-only segment the relocated range runs into.
            phdr(PT_LOAD, 4, 15 * page + 8, 3 * page),
            phdr(PT_DYNAMIC, 6, 14 * page, 64),
        ];
        assert_eq!(
            segments_of(base, &phdrs),
            vec![
                base..base + 3 * page,
                base + 4 * page..base + 12 * page,
                base + 16 * page..base + 18 * page,
            ]
        );
        let mappings = [
            CleanMapping {
                range: base..base + 2 * page,
            },
            CleanMapping {
                range: base + 10 * page..base + 20 * page,
            },
        ];
        assert_eq!(
            advisable(&mappings, &segments_of(base, &phdrs)),
            vec![
                base..base + 2 * page,
                base + 10 * page..base + 12 * page,
                base + 16 * page..base + 18 * page,
            ]
        );
    }

    #[test]
    fn this_binarys_code_is_a_read_only_segment_and_its_relocated_data_is_not() {
        // A static that needs a relocation lives in the relocated read-only data.
        static POINTER: &u8 = &7;
        let here =
            this_binarys_code_is_a_read_only_segment_and_its_relocated_data_is_not as fn() as usize;
        let segments = loaded_read_only_segments();
        assert!(segments.iter().any(|s| s.contains(&here)), "{segments:x?}");
        let relocated = (&raw const POINTER) as usize;
        assert!(
            !segments.iter().any(|s| s.contains(&relocated)),
            "{relocated:x}"
        );
    }
}
