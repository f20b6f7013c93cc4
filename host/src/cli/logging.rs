//! Logging: every line dsh logs in the one style of its own messages, through what is shown.

use super::shown;

/// The variable that sets the log filter (tracing's `EnvFilter` syntax), over `-v`.
pub(crate) const LOG_ENV: &str = "DSH_LOG";

pub(crate) fn init_logging(verbose: u8) {
    // rmcp logs the failures dsh reports itself, in its own words and with its internals: its
    // lines are shown only at `-vv`.
    let default_level = match verbose {
        0 => "warn,rmcp=off",
        1 => "info,rmcp=off",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env(LOG_ENV)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .event_format(OneStyle)
        .init();
}

/// Every line dsh logs in the one style its own messages have: `dsh: warning: …`,
/// `dsh: error: …`, and with `-v` `dsh: info: …` and `dsh: debug: …`, through
/// [`shown::shown`] (a plugin's or a server's words never carry a secret or an escape).
struct OneStyle;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for OneStyle
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        fields: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let level = event.metadata().level().as_str().to_ascii_lowercase();
        let level = if level == "warn" { "warning".to_owned() } else { level };
        let mut message = String::new();
        tracing_subscriber::fmt::FormatFields::format_fields(
            fields,
            tracing_subscriber::fmt::format::Writer::new(&mut message),
            event,
        )?;
        writeln!(writer, "dsh: {level}: {}", shown::shown(&message))
    }
}
