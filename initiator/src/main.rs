//! `nvmf-initiator`: the command-line front end of the host library (see `cli.rs`).

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
