//! An external command that prints watts: IPMI DCMI (`ipmitool dcmi power reading`
//! through a small filter), a smart plug's API, a lab meter. The command runs through
//! `sh -c` once per sampler tick and must finish within its timeout; the first number
//! it prints is the power in watts. Output past 4 KiB is ignored.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::Sample;
use crate::{Error, Result};

/// The highest figure taken as a power; anything above is a unit mistake.
const MAX_WATTS: f64 = 100_000.0;

/// A command source.
#[derive(Debug)]
pub struct Command {
    command: String,
    timeout: Duration,
}

impl Command {
    /// Runs the command once to check it answers.
    ///
    /// # Errors
    /// [`Error::Unavailable`] if the first run fails.
    pub fn new(command: &str, timeout: Duration) -> Result<Self> {
        let c = Self {
            command: command.to_owned(),
            timeout,
        };
        c.sample()
            .map_err(|e| Error::Unavailable(format!("`{command}`: {e}")))?;
        Ok(c)
    }

    pub(super) fn sample(&self) -> Result<Sample> {
        let out = run(&self.command, self.timeout)?;
        Ok(Sample {
            watts: parse_watts(&out)?,
            joules: None,
        })
    }
}

/// The first number in `out`, checked to be a plausible power.
///
/// # Errors
/// [`Error::Command`] when there is no number or it is negative, not finite or too large.
pub fn parse_watts(out: &str) -> Result<f64> {
    let token = out
        .split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == 'e' || c == 'E'))
        .find(|t| t.parse::<f64>().is_ok())
        .ok_or_else(|| Error::Command(format!("no number in its output {:?}", truncate(out))))?;
    let watts: f64 = token
        .parse()
        .map_err(|_| Error::Command(format!("bad number {token}")))?;
    if !watts.is_finite() || !(0.0..=MAX_WATTS).contains(&watts) {
        return Err(Error::Command(format!("{watts} is not a power in watts")));
    }
    Ok(watts)
}

fn run(command: &str, timeout: Duration) -> Result<String> {
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        // Its own process group, so a timeout stops what `sh` started too.
        .process_group(0)
        .spawn()
        .map_err(|e| Error::Command(format!("cannot start: {e}")))?;
    let mut stdout = child
        .stdout
        .take()
        .ok_or_else(|| Error::Command("no stdout".into()))?;
    // Read on a thread: a command that fills the pipe would otherwise never exit.
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = (&mut stdout).take(4096).read_to_end(&mut buf);
        buf
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                if let Some(pid) = rustix::process::Pid::from_raw(child.id().cast_signed()) {
                    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
                }
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::Command(format!(
                    "timed out after {} ms",
                    timeout.as_millis()
                )));
            }
            Err(e) => return Err(Error::Command(format!("wait: {e}"))),
        }
    };
    let buf = reader.join().unwrap_or_default();
    if !status.success() {
        return Err(Error::Command(format!("exited with {status}")));
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

fn truncate(s: &str) -> &str {
    let end = s.char_indices().nth(80).map_or(s.len(), |(i, _)| i);
    &s[..end]
}
