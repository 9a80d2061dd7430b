//! `oedd`: parses the command line and calls the library.

use clap::{Parser, Subcommand};

/// OED drive daemon: one per Open Ethernet Drive.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the version, target and the erasure-coding kernel this CPU runs.
    Version,
}

fn main() {
    match Cli::parse().command {
        Command::Version => println!("{}", oed_daemon::build_info()),
    }
}
