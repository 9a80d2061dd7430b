//! Arbitrary bytes to `oed_daemon::fuzzing::s3_xml`: no panic, whatever they are.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| oed_daemon::fuzzing::s3_xml(data));
