//! Gives back pages nothing will read again: the executable's dynamic relocations once
//! they are applied, and once a drive is ready, what only starting it used.
//!
//! A position-independent executable carries a table of the addresses the dynamic loader
//! must adjust at start (`.rela.dyn`; `.rel.dyn` on 32-bit ARM). The loader reads every
//! entry, so every page of the table is mapped into the process, and it stays counted in
//! the drive's resident memory for the process's life although nothing reads it again:
//! 0.8 MiB of an idle drive's 16 on x86_64 (`docs/drive.md`, "The relocation table"). The pages
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
//! beside a touched one (fault-around, 64 KiB). [`release_startup_pages`] unmaps every
//! clean page of the process's read-only file mappings; what the drive runs after that
//! maps again from the page cache on its first touch (`docs/drive.md`, "The code pages").

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
    let word = size_of::<usize>();
    let (mut table, mut size) = (None, None);
    for entry in bytes.chunks_exact(2 * word) {
        let read = |b: &[u8]| usize::from_ne_bytes(b.try_into().unwrap_or_default());
        let (tag, value) = (read(&entry[..word]), read(&entry[word..]));
        match tag {
            DT_NULL => break,
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
/// cluster with about three times the code it runs idle after that mapped.
pub const SETTLE: std::time::Duration = std::time::Duration::from_secs(30);

/// One mapping of `/proc/self/smaps` that may be given back: private, not writable,
/// backed by a file, with no page of its own (`Anonymous: 0 kB`: nothing has ever written
/// to it, not the loader's relocations either) and none locked.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CleanMapping {
    range: Range<usize>,
    rss_kib: usize,
}

/// The mappings of an smaps listing that [`release_startup_pages`] may give back: none
/// when no mapping of the listing has an anonymous page, since a running process always
/// has some (its heap, its stacks): such a listing is not the kernel's count (an
/// emulator's, say), and `Anonymous: 0 kB` in it says nothing of what was written.
fn clean_mappings(smaps: &str) -> Vec<CleanMapping> {
    struct Open {
        range: Range<usize>,
        eligible: bool,
        rss_kib: usize,
        anonymous_kib: Option<usize>,
        locked_kib: Option<usize>,
    }
    let mut found = Vec::new();
    let mut any_anonymous = false;
    let mut open: Option<Open> = None;
    let mut close = |m: Option<Open>| {
        if let Some(m) = m
            && m.eligible
            && m.anonymous_kib == Some(0)
            && m.locked_kib == Some(0)
        {
            found.push(CleanMapping {
                range: m.range,
                rss_kib: m.rss_kib,
            });
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
                    "Rss" => m.rss_kib = kib().unwrap_or(0),
                    "Anonymous" => {
                        m.anonymous_kib = kib();
                        any_anonymous |= m.anonymous_kib.is_some_and(|k| k > 0);
                    }
                    "Locked" => m.locked_kib = kib(),
                    _ => {}
                }
            }
            continue;
        }
        // A mapping's first line: `start-end perms offset dev inode [path]`.
        let Some((from, to)) = first.split_once('-') else {
            continue;
        };
        let (Ok(from), Ok(to)) = (
            usize::from_str_radix(from, 16),
            usize::from_str_radix(to, 16),
        ) else {
            continue;
        };
        let perms = words.next().unwrap_or("");
        let path = words.nth(3).unwrap_or("");
        let perms = perms.as_bytes();
        // `[vdso]`, `[heap]` and anonymous mappings have no path from the root; a deleted
        // file's mapping says so after its path, and is left alone.
        let eligible = perms.len() == 4
            && perms[0] == b'r'
            && perms[1] == b'-'
            && perms[3] == b'p'
            && path.starts_with('/')
            && !line.ends_with("(deleted)");
        close(open.replace(Open {
            range: from..to,
            eligible,
            rss_kib: 0,
            anonymous_kib: None,
            locked_kib: None,
        }));
    }
    close(open);
    if !any_anonymous {
        return Vec::new();
    }
    found
}

/// Unmaps the pages of every clean read-only file mapping of this process (the
/// executable's and the shared libraries' code and read-only data) and returns how many
/// KiB were mapped there. Call it once the drive has started: what it runs from then on
/// maps again from the page cache when first touched, so what stays counted is the code a
/// serving drive uses, not what starting it used.
///
/// The kernel may take such pages back at any moment under memory pressure; this does
/// only that, now. Writable mappings, pages anything has written (the relocated
/// read-only data, `Anonymous` above 0) and locked ones are never touched.
#[expect(
    unsafe_code,
    reason = "madvise on this process's own clean, read-only file mappings"
)]
#[must_use]
pub fn release_startup_pages() -> usize {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return 0;
    };
    let mut released = 0;
    for m in clean_mappings(&smaps) {
        // SAFETY: the range is one whole mapping of a file, private and without write
        // permission, in which no page has been written (none is anonymous) or locked:
        // every page in it is the file's own. MADV_DONTNEED on such a mapping only unmaps
        // the pages from this process; the mapping stays, and the next read of any of
        // them maps the same bytes from the file again. No thread can write them in
        // between, since the mapping is not writable.
        let done = unsafe {
            libc::madvise(
                m.range.start as *mut libc::c_void,
                m.range.len(),
                libc::MADV_DONTNEED,
            )
        };
        if done == 0 {
            released += m.rss_kib;
        }
    }
    released
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which pages of `range` this process has mapped (`/proc/self/pagemap`'s present bit).
    fn present_pages(range: &Range<usize>) -> usize {
        use std::os::unix::fs::FileExt as _;
        let page = rustix::param::page_size();
        let first = range.start / page;
        let last = range.end.div_ceil(page);
        let mut words = vec![0u8; (last - first) * 8];
        let map = std::fs::File::open("/proc/self/pagemap").expect("pagemap");
        map.read_exact_at(&mut words, (first * 8) as u64)
            .expect("read pagemap");
        words
            .chunks_exact(8)
            .filter(|w| u64::from_ne_bytes((*w).try_into().expect("8 bytes")) >> 63 == 1)
            .count()
    }

    /// Held by the tests that unmap pages: one must not unmap what another counts.
    static UNMAPPING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    #[expect(unsafe_code, reason = "reads the relocation table's pages to map them")]
    fn the_loaders_pages_of_relocations_are_given_back() {
        let _one = UNMAPPING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The test binary is position-independent, with a table of tens of KiB at least.
        let table = relocation_table().expect("a PIE test binary has dynamic relocations");
        let page = rustix::param::page_size();
        assert!(table.len() > 4 * page, "table of {} bytes", table.len());
        let inner = table.start.next_multiple_of(page)..table.end / page * page;
        // The loader read the table, so its pages are mapped, unless the test of the
        // start's pages unmapped them first: read one byte of each page to map them.
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
    /// relocated read-only data, libc's code, a locked mapping, a deleted file's, the heap
    /// and the vDSO.
    const SMAPS: &str = "\
55c0b0e54000-55c0b0fb0000 r--p 00000000 fe:00 123 /usr/bin/oedd
Size:               1392 kB
Rss:                1284 kB
Anonymous:             0 kB
Locked:                0 kB
55c0b143b000-55c0b2589000 r-xp 005e6000 fe:00 123 /usr/bin/oedd
Size:              17720 kB
Rss:                9684 kB
Anonymous:             0 kB
Locked:                0 kB
55c0b2589000-55c0b2618000 r--p 01733000 fe:00 123 /usr/bin/oedd
Rss:                 564 kB
Anonymous:           564 kB
Locked:                0 kB
7f2b92764000-7f2b928ba000 r-xp 00026000 fe:00 77 /usr/lib/x86_64-linux-gnu/libc.so.6
Rss:                1136 kB
Anonymous:             0 kB
Locked:                0 kB
7f2b92a00000-7f2b92a10000 r-xp 00000000 fe:00 78 /usr/lib/libpinned.so
Rss:                  64 kB
Anonymous:             0 kB
Locked:               64 kB
7f2b92b00000-7f2b92b10000 r-xp 00000000 fe:00 79 /usr/lib/libgone.so (deleted)
Rss:                  64 kB
Anonymous:             0 kB
Locked:                0 kB
55c0d0dcc000-55c0d0f4a000 rw-p 00000000 00:00 0                          [heap]
Rss:                1496 kB
Anonymous:          1496 kB
Locked:                0 kB
7ffde67fe000-7ffde6800000 r-xp 00000000 00:00 0                          [vdso]
Rss:                   8 kB
Anonymous:             0 kB
Locked:                0 kB
";

    #[test]
    fn only_clean_read_only_file_mappings_are_picked() {
        let picked = clean_mappings(SMAPS);
        assert_eq!(
            picked,
            vec![
                CleanMapping {
                    range: 0x55c0_b0e5_4000..0x55c0_b0fb_0000,
                    rss_kib: 1284
                },
                CleanMapping {
                    range: 0x55c0_b143_b000..0x55c0_b258_9000,
                    rss_kib: 9684
                },
                CleanMapping {
                    range: 0x7f2b_9276_4000..0x7f2b_928b_a000,
                    rss_kib: 1136
                },
            ]
        );
        // A listing in which nothing is anonymous is not the kernel's: nothing picked.
        let faked = SMAPS.replace("Anonymous:           564 kB", "Anonymous:             0 kB");
        let faked = faked.replace("Anonymous:          1496 kB", "Anonymous:             0 kB");
        assert!(clean_mappings(&faked).is_empty());
        // A listing cut short of a mapping's fields never picks that mapping.
        let cut = format!("{SMAPS}7f00-8f00 r-xp 0 fe:00 1 /lib/x.so\nRss: 4 kB\n");
        assert_eq!(clean_mappings(&cut), picked);
    }

    /// The mapping of this test binary's code: the one holding this function.
    fn own_code() -> Range<usize> {
        let here = own_code as fn() -> Range<usize> as usize;
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        maps.lines()
            .find_map(|l| {
                let (from, to) = l.split_whitespace().next()?.split_once('-')?;
                let r =
                    usize::from_str_radix(from, 16).ok()?..usize::from_str_radix(to, 16).ok()?;
                r.contains(&here).then_some(r)
            })
            .expect("the code of the test binary is mapped")
    }

    #[test]
    #[expect(
        unsafe_code,
        reason = "reads the bytes of this binary's own mapped code"
    )]
    fn the_pages_of_starting_are_given_back_and_map_again_unchanged() {
        let _one = UNMAPPING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let code = own_code();
        let before = present_pages(&code);
        assert!(before > 16, "{before} pages of code mapped");
        // SAFETY: `code` is a whole readable mapping of this process that stays mapped for
        // its life; the slice is only read.
        let bytes = unsafe { std::slice::from_raw_parts(code.start as *const u8, code.len()) };
        let copy = bytes.to_vec();
        let released = release_startup_pages();
        assert!(
            released >= before * 4,
            "{released} KiB given back of {before} pages"
        );
        // The harness's other tests run meanwhile and map some code again, but far less
        // than all that was mapped.
        let after = present_pages(&code);
        assert!(
            after < before / 2,
            "{after} pages mapped after, {before} before"
        );
        // Every page read again is the file's own, as before the call.
        assert!(bytes == copy.as_slice(), "the code read back differs");
    }
}
