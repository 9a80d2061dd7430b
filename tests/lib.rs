//! Helpers for OED's end-to-end tests: build and locate the real `oedd` binary, and run it
//! as a child process that is always cleaned up.
//!
//! A test package cannot depend on another package's binary, so [`oedd`] asks cargo to
//! build it into the same target directory as the running test, once per test process.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// Path of a freshly built `oedd` (same target directory and profile as this test).
///
/// # Panics
/// When cargo cannot build it: every end-to-end test needs it, so failing loudly is right.
pub fn oedd() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        // The test binary lives in <target>/<profile>/deps/.
        let exe = std::env::current_exe().expect("test executable path");
        let profile_dir = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("test executable is inside <target>/<profile>/deps");
        let target_dir = profile_dir.parent().expect("profile dir has a parent");
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.args(["build", "--quiet", "-p", "oed-daemon", "--bin", "oedd"])
            .arg("--target-dir")
            .arg(target_dir);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("run cargo to build oedd");
        assert!(status.success(), "building oedd failed");
        let path = profile_dir.join("oedd");
        assert!(path.exists(), "{} missing after build", path.display());
        path
    })
    .clone()
}
