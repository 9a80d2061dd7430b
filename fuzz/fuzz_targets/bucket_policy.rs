//! Arbitrary bytes to `oed_daemon::fuzzing::bucket_policy`: no panic, whatever they are.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| oed_daemon::fuzzing::bucket_policy(data));
