//! The `oedd` binary as an operator meets it first: version and help.

use std::process::Command;

#[test]
fn version_names_the_erasure_coding_kernel_this_cpu_runs() {
    let out = Command::new(oed_tests::oedd())
        .arg("version")
        .output()
        .expect("run oedd");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(text.starts_with("oedd "), "{text}");
    let kernel = oed_ec::Kernel::detect().name();
    assert!(text.contains(&format!("kernel: {kernel}")), "{text}");
}

#[test]
fn unknown_subcommand_fails_with_usage() {
    let out = Command::new(oed_tests::oedd())
        .arg("frobnicate")
        .output()
        .expect("run oedd");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Usage"), "{err}");
}
