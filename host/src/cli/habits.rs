//! DeepSeek Harness's command-line habits: a usage error that comes from one of them names the dsh
//! command that does the same thing.

use clap::error::ErrorKind;

/// What a hint needs to know of dsh's command line.
pub struct Grammar<'a> {
    /// Whether a word is one of dsh's commands.
    pub is_command: &'a dyn Fn(&str) -> bool,
    /// Whether an option (`--profile`) is followed by its value.
    pub takes_value: &'a dyn Fn(&str) -> bool,
}

/// The hint for a top-level usage error, when the words look like a DeepSeek Harness invocation:
/// options and a task without a command (`dsh --profile X "task"`), options alone (its
/// interactive session), or `--dump-config`. A word clap took for a mistyped command
/// (`suggested`) gets none: clap's own tip names the command meant.
pub fn hint(kind: ErrorKind, suggested: bool, words: &[String], grammar: &Grammar) -> Option<String> {
    if suggested
        || !matches!(kind, ErrorKind::UnknownArgument | ErrorKind::InvalidSubcommand | ErrorKind::ArgumentConflict)
    {
        return None;
    }
    let all: Vec<&String> = words.iter().collect();
    if split_task(&all, grammar).1.iter().any(|word| (grammar.is_command)(word)) {
        return None;
    }
    let rest: Vec<&String> = words.iter().filter(|word| *word != "--dump-config").collect();
    if rest.len() < words.len() {
        let command = shell_line("dsh config", &rest, "dump");
        return Some(format!("DeepSeek Harness's --dump-config is `{command}` in dsh"));
    }
    let (options, task) = split_task(&rest, grammar);
    match task.as_slice() {
        [] if options.is_empty() => None,
        [] => Some(format!("dsh talks with the agent through a command: `{}`", shell_line("dsh chat", &options, ""))),
        _ => Some(format!("dsh runs a task through a command: `{}`", shell_line("dsh run", &rest, ""))),
    }
}

/// The options (with their values) and the words of the task.
fn split_task<'w>(words: &[&'w String], grammar: &Grammar) -> (Vec<&'w String>, Vec<&'w String>) {
    let (mut options, mut task) = (Vec::new(), Vec::new());
    let mut value_next = false;
    for word in words {
        match (value_next, word.starts_with('-')) {
            (true, _) | (false, true) => options.push(*word),
            (false, false) => task.push(*word),
        }
        value_next = !value_next && word.starts_with('-') && !word.contains('=') && (grammar.takes_value)(word);
    }
    (options, task)
}

fn shell_line(command: &str, words: &[&String], tail: &str) -> String {
    let mut line = command.to_owned();
    for word in words {
        line.push(' ');
        line.push_str(&shell_quote(word));
    }
    if !tail.is_empty() {
        line.push(' ');
        line.push_str(tail);
    }
    line
}

/// `word` as a POSIX shell reads it back: bare when it is plain, else single-quoted.
fn shell_quote(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./=:@,+%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(list: &[&str]) -> Vec<String> {
        list.iter().map(|word| (*word).to_owned()).collect()
    }

    const GRAMMAR: Grammar =
        Grammar { is_command: &|word| ["run", "web"].contains(&word), takes_value: &|word| word == "--profile" };

    fn hint_of(kind: ErrorKind, list: &[&str]) -> Option<String> {
        hint(kind, false, &words(list), &GRAMMAR)
    }

    #[test]
    fn a_task_without_a_command_is_shown_as_dsh_run() {
        let hint = hint_of(ErrorKind::InvalidSubcommand, &["Say hello"]).unwrap();
        assert_eq!(hint, "dsh runs a task through a command: `dsh run 'Say hello'`");
        let hint = hint_for(&["--profile", "demo", "it's"]);
        assert_eq!(hint, "dsh runs a task through a command: `dsh run --profile demo 'it'\\''s'`");
    }

    fn hint_for(list: &[&str]) -> String {
        hint_of(ErrorKind::UnknownArgument, list).unwrap()
    }

    #[test]
    fn dump_config_is_shown_as_config_dump_with_the_same_options() {
        assert_eq!(
            hint_for(&["--profile", "demo", "--dump-config"]),
            "DeepSeek Harness's --dump-config is `dsh config --profile demo dump` in dsh"
        );
    }

    #[test]
    fn an_error_inside_a_dsh_command_gets_no_hint() {
        assert_eq!(hint_of(ErrorKind::UnknownArgument, &["run", "--bogus"]), None);
        assert_eq!(hint_of(ErrorKind::MissingRequiredArgument, &["x"]), None);
    }

    #[test]
    fn a_mistyped_command_gets_clap_s_tip_alone() {
        assert_eq!(hint(ErrorKind::InvalidSubcommand, true, &words(&["sesion", "list"]), &GRAMMAR), None);
    }

    #[test]
    fn options_alone_are_the_interactive_session_even_with_a_profile_named_as_a_command() {
        assert_eq!(
            hint_for(&["--profile", "web"]),
            "dsh talks with the agent through a command: `dsh chat --profile web`"
        );
        assert_eq!(
            hint_for(&["--profile", "headless", "job"]),
            "dsh runs a task through a command: `dsh run --profile headless job`"
        );
        assert_eq!(hint_of(ErrorKind::InvalidSubcommand, &["run", "--profile", "web"]), None);
    }
}
