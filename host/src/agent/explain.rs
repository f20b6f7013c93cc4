//! `dsh config explain`: who handles each failure code on each route, found by asking the real
//! listeners rather than guessing from their configs. For every code the adapter can produce, a
//! failure with that code is offered to the waterfall over a scratch history (the clock at 0,
//! every random sample 0.5, no cancellation); a retry it decides is taken into the history and
//! the failure offered again, until nobody retries or the chain reaches [`UNBOUNDED_AFTER`]
//! retries (shown as a chain without end).

use dsh_abi::events;
use std::cell::RefCell;
use std::sync::Arc;

use dsh_abi::{Answer, Decision, DownstreamOutcome, Failure, RequestErrorPayload, RetryPolicy};

use super::assembly::Assembly;
use super::route::Route;
use crate::context::{CallContext, SessionlessHost};
use crate::counters::MemoryStore;
use crate::llm::classify::ADAPTER_CODES;
use crate::plugin::RowInstance;
use crate::waterfall::{self, Listener, ListenerError, Outcome};
use dsh_session::index::HistoryIndex;

/// A chain still retrying after this many retries is shown as one without end.
pub const UNBOUNDED_AFTER: usize = 12;

/// What the waterfall does with one failure code.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Nobody retries: the turn ends with the failure.
    NoRetry,
    /// A row refuses the retry, for this reason (a retry budget).
    Refused(String),
    /// Retries after these delays, then gives up (or, when `unbounded`, goes on).
    Retries { delays_ms: Vec<f64>, unbounded: bool },
}

/// One failure code on one route.
#[derive(Debug, Clone, PartialEq)]
pub struct CodeHandling {
    pub code: &'static str,
    /// The row that decides: the one whose retry is carried out, else the first that did not
    /// pass; `None` when every listener passed.
    pub row: Option<String>,
    pub action: Action,
    /// Listeners that failed on the way (row, message).
    pub failures: Vec<(String, String)>,
    /// The route a failover row sends the step to first, and that row; `action` is then what
    /// the rows below it do (on the last route, or when no other route can take the step).
    pub failover: Option<Failover>,
}

/// A failover hop `config explain` found.
#[derive(Debug, Clone, PartialEq)]
pub struct Failover {
    pub row: String,
    pub route: String,
}

/// One provider route.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteHandling {
    pub provider: String,
    pub model: String,
    pub policy: RetryPolicy,
    pub codes: Vec<CodeHandling>,
}

/// A listener that remembers the rows that did not pass.
struct Traced<'a> {
    row: &'a RowInstance,
    acted: &'a RefCell<Vec<String>>,
}

impl Listener for Traced<'_> {
    fn row_id(&self) -> &str {
        self.row.row_id()
    }

    fn on_request_error(&self, payload: &RequestErrorPayload, ctx: &CallContext<'_>) -> Result<Answer, ListenerError> {
        let answer = self.row.on_request_error(payload, ctx);
        if !matches!(answer, Ok(Answer::Pass)) {
            self.acted.borrow_mut().push(self.row.row_id().to_owned());
        }
        answer
    }

    fn after_downstream(
        &self,
        payload: &RequestErrorPayload,
        ctx: &CallContext<'_>,
        outcome: &mut DownstreamOutcome,
    ) -> Result<Decision, ListenerError> {
        self.row.after_downstream(payload, ctx, outcome)
    }
}

/// Every route of `assembly`, each failure code with who handles it and how; `scratch` is the
/// counter store the assembly's rows were built with, emptied before each question so every
/// code meets full budgets.
pub fn explain(assembly: &Assembly, scratch: &MemoryStore) -> Vec<RouteHandling> {
    let mut routes: Vec<RouteHandling> = assembly
        .routes
        .values()
        .map(|route| RouteHandling {
            provider: route.provider.clone(),
            model: route.model.clone(),
            policy: route.policy.clone(),
            codes: ADAPTER_CODES
                .iter()
                .map(|(code, status)| {
                    scratch.clear();
                    let rows: Vec<&RowInstance> = assembly.listeners.iter().map(Arc::as_ref).collect();
                    handle(&rows, route, code, *status, None)
                })
                .collect(),
        })
        .collect();
    routes.sort_by(|a, b| a.provider.cmp(&b.provider));
    routes
}

/// How `code` on `route` is handled; a row that switches routes is noted as the failover and
/// the question asked again without it, for the retry action next to it.
fn handle(
    listeners: &[&RowInstance],
    route: &Route,
    code: &'static str,
    status: Option<u32>,
    failover: Option<Failover>,
) -> CodeHandling {
    let payload = probe(route, code, status);
    let header = r#"{"type":"session","version":0,"id":"explain","createdAt":0}"#.to_owned();
    let mut host = SessionlessHost { history: HistoryIndex::new(header), ..SessionlessHost::default() };
    let acted = RefCell::new(Vec::new());
    let traced: Vec<Traced<'_>> = listeners.iter().map(|row| Traced { row, acted: &acted }).collect();
    let traced: Vec<&Traced<'_>> = traced.iter().collect();
    let mut delays = Vec::new();
    let mut row = None;
    let mut failures = Vec::new();
    loop {
        acted.borrow_mut().clear();
        let outcome = waterfall::run(&traced, &payload, &host.context());
        match outcome {
            Outcome::Switch { switch, row_id } if failover.is_none() && delays.is_empty() => {
                let rest: Vec<&RowInstance> = listeners.iter().copied().filter(|row| row.row_id() != row_id).collect();
                let failover = Failover { row: row_id, route: switch.route.into_string() };
                return handle(&rest, route, code, status, Some(failover));
            }
            Outcome::Switch { .. } => {
                let action = Action::Retries { delays_ms: delays, unbounded: false };
                return CodeHandling { code, row, action, failures, failover };
            }
            Outcome::Retry { retry, row_id } => {
                row.get_or_insert(row_id);
                delays.push(retry.delay_ms);
                if delays.len() >= UNBOUNDED_AFTER {
                    return CodeHandling {
                        code,
                        row,
                        action: Action::Retries { delays_ms: delays, unbounded: true },
                        failures,
                        failover,
                    };
                }
                let line = format!(r#"{{"type":"llm/retry","seq":0,"time":0,"data":{}}}"#, retry.record);
                host.history.observe(events::LLM_RETRY, &line, &retry.record);
            }
            Outcome::NoRetry { failures: found, refused } => {
                failures.extend(found);
                let action = match refused {
                    Some((refusing, reason)) if delays.is_empty() => {
                        row = Some(refusing);
                        Action::Refused(reason)
                    }
                    _ => end_of_chain(delays, &mut row, acted.borrow().first()),
                };
                return CodeHandling { code, row, action, failures, failover };
            }
            Outcome::Cancelled => return CodeHandling { code, row, action: Action::NoRetry, failures, failover },
        }
    }
}

/// The failure `explain` asks the rows about: `code` (with `status`) on `route`, at turn 1, step 1.
fn probe(route: &Route, code: &'static str, status: Option<u32>) -> RequestErrorPayload {
    let mut failure = Failure::new(code, format!("a {code} failure (dsh config explain)"));
    failure.status = status.into();
    let mut payload = RequestErrorPayload::new(1, 1, &route.provider, failure, Some(route.policy.clone()));
    payload.model = route.model.as_str().into();
    payload.endpoint_host = route.endpoint_host.as_str().into();
    payload
}

/// What a chain that stopped without a refusal did: the retries so far, or none at all (named
/// after the first row that acted).
fn end_of_chain(delays: Vec<f64>, row: &mut Option<String>, first_acted: Option<&String>) -> Action {
    if delays.is_empty() {
        *row = first_acted.cloned();
        return Action::NoRetry;
    }
    Action::Retries { delays_ms: delays, unbounded: false }
}

/// `retries 5 times: 0.5s, 1s, 2s, 4s, 8s`, `retries without end: 1s, 2s, …`, `no retry`.
pub fn describe(action: &Action) -> String {
    match action {
        Action::NoRetry => "no retry: the turn ends with the failure".to_owned(),
        Action::Refused(reason) => format!("refused: {reason}"),
        Action::Retries { delays_ms, unbounded } => {
            let shown: Vec<String> = delays_ms.iter().take(6).map(|delay| seconds(*delay)).collect();
            let more = if delays_ms.len() > 6 || *unbounded { ", …" } else { "" };
            if *unbounded {
                format!("retries without end, after {}{more}", shown.join(", "))
            } else {
                let times = if delays_ms.len() == 1 { "once".to_owned() } else { format!("{} times", delays_ms.len()) };
                format!("retries {times}, after {}{more}", shown.join(", "))
            }
        }
    }
}

/// `0.5s`, `2s`, `2.2s`: seconds with at most one decimal.
/// Milliseconds as seconds rounded to tenths, without a trailing `.0`.
pub(crate) fn seconds(ms: f64) -> String {
    if !ms.is_finite() || ms >= 1e15 {
        return dsh_session::timeline::seconds(ms);
    }
    let tenths = (ms / 100.0).round() / 10.0;
    if tenths.fract() == 0.0 {
        format!("{tenths:.0}s")
    } else {
        format!("{tenths:.1}s")
    }
}

/// A policy in one line: `normal, 5 retries of EMPTY_RESPONSE RATE_LIMIT …, 0.5s to 10s ±10 %`.
pub fn describe_policy(policy: &RetryPolicy) -> String {
    let backoff = format!(
        "{} to {} ±{} %",
        seconds(policy.initial_delay_ms),
        seconds(policy.max_delay_ms),
        dsh_abi::js::number(policy.jitter_ratio * 100.0)
    );
    match policy.mode {
        dsh_abi::PolicyMode::Normal => {
            let codes: Vec<&str> = policy.retryable_codes.iter().map(|code| code.as_str()).collect();
            format!("normal, up to {} retries of {}, {backoff}", policy.max_retries, codes.join(" "))
        }
        dsh_abi::PolicyMode::Always => format!("always (every code, without end), {backoff}"),
    }
}

impl RouteHandling {
    /// The `--json` shape: `{provider, model, policy, codes: {CODE: {row, action, delaysMs?,
    /// unbounded?, failover?: {row, route}}}}`.
    pub fn to_json(&self) -> serde_json::Value {
        let policy = &self.policy;
        let mut codes = serde_json::Map::new();
        for handling in &self.codes {
            let mut entry = serde_json::json!({"row": handling.row});
            match &handling.action {
                Action::NoRetry => entry["action"] = "no-retry".into(),
                Action::Refused(reason) => {
                    entry["action"] = "refused".into();
                    entry["reason"] = reason.as_str().into();
                }
                Action::Retries { delays_ms, unbounded } => {
                    entry["action"] = "retry".into();
                    entry["delaysMs"] = delays_ms.iter().map(|delay| serde_json::Value::from(*delay)).collect();
                    entry["unbounded"] = (*unbounded).into();
                }
            }
            if let Some(failover) = &handling.failover {
                entry["failover"] = serde_json::json!({"row": failover.row, "route": failover.route});
            }
            if !handling.failures.is_empty() {
                entry["failures"] = handling
                    .failures
                    .iter()
                    .map(|(row, message)| serde_json::json!({"row": row, "message": message}))
                    .collect();
            }
            codes.insert(handling.code.to_owned(), entry);
        }
        serde_json::json!({
            "provider": self.provider,
            "model": self.model,
            "policy": {
                "mode": policy.mode.as_str(),
                "maxRetries": (policy.mode == dsh_abi::PolicyMode::Normal).then_some(policy.max_retries),
                "retryableCodes": policy.retryable_codes.iter().map(|code| code.as_str()).collect::<Vec<_>>(),
                "backoff": {"initialDelayMs": policy.initial_delay_ms, "maxDelayMs": policy.max_delay_ms, "jitterRatio": policy.jitter_ratio},
            },
            "codes": codes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_read_as_a_user_says_them() {
        assert_eq!(describe(&Action::NoRetry), "no retry: the turn ends with the failure");
        let five = Action::Retries { delays_ms: vec![500.0, 1000.0, 2000.0, 4000.0, 8000.0], unbounded: false };
        assert_eq!(describe(&five), "retries 5 times, after 0.5s, 1s, 2s, 4s, 8s");
        let endless = Action::Retries { delays_ms: vec![2200.0; 12], unbounded: true };
        assert_eq!(describe(&endless), "retries without end, after 2.2s, 2.2s, 2.2s, 2.2s, 2.2s, 2.2s, …");
        let once = Action::Retries { delays_ms: vec![1000.0], unbounded: false };
        assert_eq!(describe(&once), "retries once, after 1s");
    }

    #[test]
    fn every_adapter_code_is_explained() {
        let codes: Vec<&str> = ADAPTER_CODES.iter().map(|(code, _)| *code).collect();
        assert!(codes.contains(&"SERVER") && codes.contains(&"AUTH") && codes.contains(&"HTTP_404"));
    }
}
