//! Gives back the pages of the executable's dynamic relocations once they are applied.
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

    #[test]
    fn the_loaders_pages_of_relocations_are_given_back() {
        // The test binary is position-independent, with a table of tens of KiB at least.
        let table = relocation_table().expect("a PIE test binary has dynamic relocations");
        let page = rustix::param::page_size();
        assert!(table.len() > 4 * page, "table of {} bytes", table.len());
        let inner = table.start.next_multiple_of(page)..table.end / page * page;
        assert!(
            present_pages(&inner) > 0,
            "the loader read the table, so its pages are mapped"
        );
        let released = release_relocation_pages();
        assert_eq!(released, inner.len());
        assert_eq!(
            present_pages(&inner),
            0,
            "no page of the table is left mapped"
        );
    }
}
