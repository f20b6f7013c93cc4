//! DeepSeek Harness's command-line habits: a usage error that comes from one of them names the dsh
//! command that does the same thing.

use clap::error::ErrorKind;

/// The hint for a top-level usage error, when the words look like a DeepSeek Harness invocation:
/// options and a task without a command (`dsh --profile X "task"`), or `--dump-config`.
pub fn hint(kind: ErrorKind, words: &[String], is_command: impl Fn(&str) -> bool) -> Option<String> {
    if !matches!(kind, ErrorKind::UnknownArgument | ErrorKind::InvalidSubcommand) {
        return None;
    }
    if words.iter().any(|word| is_command(word)) {
        return None;
    }
    let rest: Vec<&String> = words.iter().filter(|word| *word != "--dump-config").collect();
    if rest.len() < words.len() {
        let command = shell_line("dsh config", &rest, "dump");
        return Some(format!("DeepSeek Harness's --dump-config is `{command}` in dsh"));
    }
    if rest.is_empty() {
        return None;
    }
    let command = shell_line("dsh run", &rest, "");
    Some(format!("dsh runs a task through a command: `{command}`"))
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

    fn no_commands(_: &str) -> bool {
        false
    }

    #[test]
    fn a_task_without_a_command_is_shown_as_dsh_run() {
        let hint = hint(ErrorKind::InvalidSubcommand, &words(&["Say hello"]), no_commands).unwrap();
        assert_eq!(hint, "dsh runs a task through a command: `dsh run 'Say hello'`");
        let hint = hint_for(&["--profile", "demo", "it's"]);
        assert_eq!(hint, "dsh runs a task through a command: `dsh run --profile demo 'it'\\''s'`");
    }

    fn hint_for(list: &[&str]) -> String {
        hint(ErrorKind::UnknownArgument, &words(list), no_commands).unwrap()
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
        let is_run = |word: &str| word == "run";
        assert_eq!(hint(ErrorKind::UnknownArgument, &words(&["run", "--bogus"]), is_run), None);
        assert_eq!(hint(ErrorKind::MissingRequiredArgument, &words(&["x"]), no_commands), None);
    }
}
