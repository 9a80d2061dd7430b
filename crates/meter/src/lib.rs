//! `oed-meter`: per-drive power, energy, I/O and CPU metering for OED.
//!
//! Not built yet: the power sources (hwmon, RAPL, an external command, a device model),
//! the energy integrator and the Prometheus collectors arrive with the metering work
//! (see `docs/roadmap.md`). The crate exists now so the workspace has its final shape and
//! the cross builds cover it from the start. It will hold no HTTP code.
//!
//! # Layout
//! Empty for now.
