//! Man pages and shell completions generated from a binary's clap definition
//! (`clap_mangen`, `clap_complete`) for packaging. Each binary's hidden `gen-docs DIR`
//! subcommand calls [`write`] with its own `Command`; `scripts/package-deb` runs it
//! at build time, so nothing generated is committed. Behind the `cli-docs` feature:
//! the library users that are not binaries do not pull clap in.

use std::path::{Path, PathBuf};

use clap::Command;
use clap_complete::Shell;

/// The shells completions are written for (file names as `clap_complete` gives them:
/// `NAME.bash`, `_NAME`, `NAME.fish`).
pub const SHELLS: [Shell; 3] = [Shell::Bash, Shell::Zsh, Shell::Fish];
/// The name of clap's generated help subcommand.
const HELP: &str = "help";

/// Writes `DIR/man/NAME.1` and one page per visible subcommand, nested ones included
/// (`NAME-SUB.1`, `NAME-SUB-SUBSUB.1`, git's naming), and `DIR/completions/` for
/// [`SHELLS`]. Returns the files written.
pub fn write(cmd: Command, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut cmd = cmd;
    // Building fills in the subcommands' display names (`NAME-SUB`) and bin names.
    cmd.build();
    let man = dir.join("man");
    let completions = dir.join("completions");
    std::fs::create_dir_all(&man)?;
    std::fs::create_dir_all(&completions)?;
    let mut out = Vec::new();
    man_pages(&cmd, &man, &mut out)?;
    let name = cmd.get_name().to_owned();
    for shell in SHELLS {
        out.push(clap_complete::generate_to(
            shell,
            &mut cmd.clone(),
            &name,
            &completions,
        )?);
    }
    Ok(out)
}

fn man_pages(cmd: &Command, dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let page = cmd.get_display_name().unwrap_or(cmd.get_name()).to_owned();
    let path = dir.join(format!("{page}.1"));
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut buf)?;
    std::fs::write(&path, buf)?;
    out.push(path);
    // clap's generated `help` subcommand gets no page of its own.
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != HELP)
    {
        man_pages(sub, dir, out)?;
    }
    Ok(())
}
