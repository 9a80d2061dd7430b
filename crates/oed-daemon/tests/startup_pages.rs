//! The pages a drive gives back once it is ready (`oed_daemon::loader_pages`), in a process
//! of their own: nothing else runs here to map code again meanwhile.

use std::ops::Range;

use oed_daemon::loader_pages::present_pages;

/// The mapping of this test binary's code: the one holding this function.
fn own_code() -> Range<usize> {
    let here = own_code as fn() -> Range<usize> as usize;
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    maps.lines()
        .find_map(|l| {
            let (from, to) = l.split_whitespace().next()?.split_once('-')?;
            let r = usize::from_str_radix(from, 16).ok()?..usize::from_str_radix(to, 16).ok()?;
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
    // A pointer in the relocated read-only data, which must stay as the loader made it.
    static SEVEN: u8 = 7;
    static POINTER: &u8 = &SEVEN;
    let code = own_code();
    // SAFETY: `code` is a whole readable mapping of this process that stays mapped for
    // its life; the slice is only read.
    let bytes = unsafe { std::slice::from_raw_parts(code.start as *const u8, code.len()) };
    // Reading all of it maps all of it, and keeps a copy to compare with.
    let copy = bytes.to_vec();
    let before = present_pages(&code);
    assert_eq!(before, code.len() / rustix::param::page_size());
    let released = oed_daemon::loader_pages::release_startup_pages();
    assert!(
        released * 1024 >= code.len(),
        "{released} KiB given back, the code is {} KiB",
        code.len() / 1024
    );
    // What this test ran since maps again, with its neighbours (fault-around): far less
    // than all of it.
    let after = present_pages(&code);
    assert!(
        after < before / 2,
        "{after} pages mapped after, {before} before"
    );
    // Every page read again is the file's own, as before the call.
    assert!(bytes == copy.as_slice(), "the code read back differs");
    // The relocated read-only data is untouched: the pointer still points where the
    // loader made it point.
    assert_eq!(*std::hint::black_box(POINTER), 7);
    // The comparison read every page again, so all are mapped once more; a second call
    // (a drive's, after its first seconds of serving) gives them back again.
    assert_eq!(present_pages(&code), before);
    assert_eq!(oed_daemon::loader_pages::release_startup_pages(), released);
    let again = present_pages(&code);
    assert!(
        again < before / 2,
        "{again} pages mapped after the second call, {before} before"
    );
}
