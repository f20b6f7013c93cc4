//! `dsh man`: the manual pages clap renders from the command definitions, and the sections of
//! dsh(1) clap does not know — EXIT STATUS, ENVIRONMENT and FILES — from the constants they
//! describe.

use clap::CommandFactory;

use super::args::{Cli, ManArgs};
use super::exit::{Outcome, EXIT_STATUSES};
use super::logging::LOG_ENV;
use crate::plugin::catalog::PLUGIN_PATH_ENV;
use crate::profile::HOME_ENV;
use crate::NotFound;
use dsh_session::store::{PASSWORD_ENV, STORE_ENV};

pub fn run(args: ManArgs) -> Outcome {
    let mut root = Cli::command().disable_help_subcommand(true);
    root.build();
    if let Some(dir) = args.dir {
        std::fs::create_dir_all(&dir)?;
        write_pages(&root, &dir)?;
        return Ok(());
    }
    let page = page_of(&root, &args.command)?;
    out_text!("{}", String::from_utf8_lossy(&page))?;
    Ok(())
}

/// The page of `root`'s subcommand at `path` (dsh(1) itself for an empty path). A page's own
/// name is taken too: `session-repair` and `dsh-session-repair` are `session repair`.
fn page_of(root: &clap::Command, path: &[String]) -> anyhow::Result<Vec<u8>> {
    if let [one] = path {
        let page = format!("dsh-{}", one.strip_prefix("dsh-").unwrap_or(one));
        if let Some(command) = root.find_subcommand(one).is_none().then(|| named_page(root, &page)).flatten() {
            return render(command.clone(), false);
        }
    }
    let mut command = root;
    for word in path {
        let missing = || NotFound(format!("dsh has no command `dsh {}`", path.join(" ")));
        command = command.find_subcommand(word).ok_or_else(missing)?;
    }
    render(command.clone(), path.is_empty())
}

/// The command below `command` whose page is `page` (`dsh-session-repair`).
fn named_page<'a>(command: &'a clap::Command, page: &str) -> Option<&'a clap::Command> {
    let named = |sub: &&clap::Command| sub.get_display_name() == Some(page);
    command.get_subcommands().find(named).or_else(|| command.get_subcommands().find_map(|sub| named_page(sub, page)))
}

fn write_pages(command: &clap::Command, dir: &std::path::Path) -> anyhow::Result<()> {
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        write_pages(sub, dir)?;
    }
    let page = render(command.clone(), command.get_name() == "dsh")?;
    let name = format!("{}.1", command.get_display_name().unwrap_or(command.get_name()));
    std::fs::write(dir.join(&name), page).map_err(|err| anyhow::anyhow!("cannot write {name}: {err}"))
}

fn render(command: clap::Command, with_reference: bool) -> anyhow::Result<Vec<u8>> {
    let mut page = Vec::new();
    clap_mangen::Man::new(command).source(format!("dsh {}", super::args::VERSION)).render(&mut page)?;
    if with_reference {
        page.extend_from_slice(reference_sections().as_bytes());
    }
    Ok(page)
}

/// EXIT STATUS, ENVIRONMENT and FILES, in roff.
fn reference_sections() -> String {
    let mut text = String::from(".SH \"EXIT STATUS\"\n");
    for (code, meaning) in EXIT_STATUSES {
        text.push_str(&format!(".TP\n{code}\n{}\n", escape(meaning)));
    }
    text.push_str(".SH ENVIRONMENT\n");
    for (name, meaning) in environment() {
        text.push_str(&format!(".TP\n\\fB{name}\\fR\n{}\n", escape(meaning)));
    }
    text.push_str(".SH FILES\n");
    for (path, meaning) in FILES {
        text.push_str(&format!(".TP\n\\fI{}\\fR\n{}\n", escape(path), escape(meaning)));
    }
    text
}

fn environment() -> [(&'static str, &'static str); 7] {
    [
        (HOME_ENV, "the dsh home (default ~/.dsh); --home overrides it"),
        (PLUGIN_PATH_ENV, "more directories (:-separated) where bundled plugin libraries are looked for"),
        (LOG_ENV, "the log filter on stderr (tracing's EnvFilter syntax, e.g. debug); -v and -vv set it too"),
        ("NO_COLOR", "when set and not empty, stderr is never coloured"),
        (STORE_ENV, "where sessions are kept: files, or postgres://USER@HOST:PORT/DB; over $DSH_HOME/sessions.toml"),
        (PASSWORD_ENV, "the session database's password, unless sessions.toml names another variable (password-env)"),
        (
            "DEEPSEEK_API_KEY",
            "the web profile's API key, read at request time; a provider row's apiKeyEnv names another",
        ),
    ]
}

const FILES: [(&str, &str); 7] = [
    ("$DSH_HOME/profiles/NAME/profile.yml", "a profile's bundles and installed packages"),
    ("$DSH_HOME/profiles/NAME/cordis.patch.yml", "the profile's user layer"),
    ("$DSH_HOME/cordis.patch.yml", "the home-wide user layer, over every profile's layers"),
    ("$DSH_HOME/sessions/ID/session.jsonl", "a session's durable log (DeepSeek Harness's format)"),
    (
        "$DSH_HOME/sessions.toml",
        "where the home keeps its sessions: store = \"files\" or a postgres:// URL, and password-env",
    ),
    ("$DSH_HOME/stores/counters.json", "the counters shared by every dsh process of the machine (store: machine)"),
    ("$DSH_HOME/locks/", "the writer locks of profiles"),
];

/// Text safe as a roff line: no leading control character, backslashes doubled.
fn escape(text: &str) -> String {
    let text = text.replace('\\', "\\e");
    match text.starts_with(['.', '\'']) {
        true => format!("\\&{text}"),
        false => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> clap::Command {
        let mut root = Cli::command().disable_help_subcommand(true);
        root.build();
        root
    }

    #[test]
    fn every_page_dsh_1_names_exists() {
        let root = root();
        let main = String::from_utf8(page_of(&root, &[]).unwrap()).unwrap();
        for sub in root.get_subcommands() {
            let name = sub.get_display_name().unwrap();
            assert!(main.contains(&format!("{}(1)", name.replace('-', "\\-"))), "dsh(1) does not name {name}");
            let page = String::from_utf8(page_of(&root, &[sub.get_name().to_owned()]).unwrap()).unwrap();
            assert!(page.starts_with(&format!(".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n.TH {name} 1")), "{page}");
        }
    }

    #[test]
    fn dsh_1_lists_every_exit_status_and_the_environment() {
        let main = String::from_utf8(page_of(&root(), &[]).unwrap()).unwrap();
        for (code, _) in EXIT_STATUSES {
            assert!(main.contains(&format!(".TP\n{code}\n")), "exit {code} missing");
        }
        for section in [".SH \"EXIT STATUS\"", ".SH ENVIRONMENT", ".SH FILES", "DSH_HOME", "DSH_PLUGIN_PATH"] {
            assert!(main.contains(section), "{section} missing");
        }
    }

    #[test]
    fn a_page_is_found_by_the_name_dsh_1_gives_it() {
        let root = root();
        let by_words = page_of(&root, &["session".into(), "repair".into()]).unwrap();
        for name in ["session-repair", "dsh-session-repair"] {
            assert_eq!(page_of(&root, &[name.into()]).unwrap(), by_words, "{name}");
        }
        assert!(page_of(&root, &["mock-server".into()]).is_ok());
    }

    #[test]
    fn an_unknown_command_is_not_found() {
        let error = page_of(&root(), &["session".into(), "nope".into()]).unwrap_err();
        assert_eq!(error.to_string(), "dsh has no command `dsh session nope`");
    }
}
