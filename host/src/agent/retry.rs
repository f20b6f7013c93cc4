//! The retry step of a failed request — where a retry record is written and where the wait
//! happens:
//!
//! ```text
//! waterfall (agent/request-error) → cancelled? stop
//!   → switch: the turn loop records the hop and sends the step to the other route at once
//!   → no retry: the turn ends with the failure (a row that refused the retry, such as a retry
//!     budget, first gets its reason written: `llm/retry-refused`, ignorable, and shown)
//!   → retry (checked: delay in range and equal to the record's delayMs, record one JSON object)
//!       → append llm/retry (the invariant may refuse it: the turn ends with INVARIANT)
//!       → commit (durable before the wait)
//!       → wait until the record's time + delay, cancellable, counting down
//!       → append llm/retry-started, commit → send the same step again
//! ```
//!
//! A cancelled wait writes no `llm/retry-started`.

use std::sync::Arc;
use std::time::Duration;

use dsh_abi::events::{self, RetryRefused, RetryStarted};
use dsh_abi::retry::CheckedRetry;
use dsh_abi::{Failure, RequestErrorPayload, RouteSwitch};

use super::cancel::Cancel;
use super::view::{RetryNotice, TurnView};
use crate::context::{call_context, ContextWindows, Services};
use crate::plugin::RowInstance;
use crate::waterfall::{self, Outcome};
use dsh_session::log::{AppendError, NewEvent, SessionLog};

const RETRY_TICK: Duration = Duration::from_millis(100);

/// What the retry step came to.
#[derive(Debug, Clone, PartialEq)]
pub enum RetryStep {
    /// The wait is over and `llm/retry-started` is durable: send the same step again.
    Again,
    /// Nobody retried, or the record was refused: the turn ends with this failure.
    GiveUp(Failure),
    /// Row `row_id` sends the step to another route now.
    Switch { switch: RouteSwitch, row_id: String },
    /// The turn was cancelled (during the waterfall or the wait).
    Cancelled,
}

/// Everything the step reads and writes.
pub struct RetryParts<'a> {
    pub log: &'a mut SessionLog,
    /// The routes whose `contextWindow` a listener may ask for.
    pub routes: &'a dyn ContextWindows,
    pub listeners: &'a [Arc<RowInstance>],
    /// Whether a listener may wait on a counter store's I/O.
    pub may_wait: bool,
    pub services: &'a dyn Services,
    pub cancel: &'a Cancel,
    pub view: &'a mut dyn TurnView,
}

/// Offers the failure of `payload` to the waterfall and carries out its decision.
pub async fn retry_step(parts: RetryParts<'_>, payload: &RequestErrorPayload) -> Result<RetryStep, AppendError> {
    let RetryParts { log, routes, listeners, may_wait, services, cancel, view } = parts;
    let outcome = {
        let mut context = call_context(log.index(), cancel.flag(), false, services);
        context.session.routes = Some(routes);
        let listeners: Vec<&RowInstance> = listeners.iter().map(Arc::as_ref).collect();
        crate::plugin::instance::call_rows(may_wait, || waterfall::run(&listeners, payload, &context))
    };
    let (retry, row_id) = match outcome {
        Outcome::Cancelled => return Ok(RetryStep::Cancelled),
        Outcome::NoRetry { refused: Some((row, reason)), .. } => {
            let refused =
                RetryRefused { turn: payload.turn, step: payload.step, row: row.clone(), reason: reason.clone() };
            log.append(NewEvent::typed(&refused), services.now_ms() as u64)?;
            view.retry_refused(&row, &reason);
            return Ok(RetryStep::GiveUp(payload.failure.clone()));
        }
        Outcome::NoRetry { refused: None, .. } => return Ok(RetryStep::GiveUp(payload.failure.clone())),
        Outcome::Retry { retry, row_id } => (retry, row_id),
        Outcome::Switch { switch, row_id } => return Ok(RetryStep::Switch { switch, row_id }),
    };
    let now = services.now_ms() as u64;
    let record = NewEvent::raw(events::LLM_RETRY, retry.record.clone());
    let appended = match log.append(record, now) {
        Ok(appended) => appended,
        Err(AppendError::Refused { row, message }) => {
            let message = format!("{message} (llm/retry record from row \"{row_id}\", refused by row \"{row}\")");
            return Ok(RetryStep::GiveUp(Failure::new("INVARIANT", message)));
        }
        Err(err) => return Err(err),
    };
    log.commit()?;
    let notice = notice(&retry, &payload.failure);
    let deadline = appended.at + notice.delay;
    view.retry_scheduled(&notice);
    let mut tick = tokio::time::interval(RETRY_TICK);
    let counts_down = view.counts_down();
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => break,
            () = cancel.cancelled() => {
                view.retry_done();
                return Ok(RetryStep::Cancelled);
            }
            _ = tick.tick(), if counts_down => {
                let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
                view.retry_tick(&notice, remaining);
            }
        }
    }
    view.retry_done();
    let started = RetryStarted {
        retry_id: retry.retry_id.to_string(),
        turn: payload.turn,
        step: payload.step,
        retry: retry.retry.clone(),
    };
    log.append(NewEvent::typed(&started), services.now_ms() as u64)?;
    log.commit()?;
    Ok(RetryStep::Again)
}

/// What the display needs from a retry record: its place in the chain, the wait and why.
fn notice(retry: &CheckedRetry, failure: &Failure) -> RetryNotice {
    RetryNotice {
        count: dsh_session::timeline::retry_place(
            Some(&retry.retry),
            retry.max_retries.as_ref(),
            retry.head_retries.as_ref(),
        ),
        delay: Duration::from_secs_f64(retry.delay_ms / 1000.0),
        code: failure.code.to_string(),
        message: failure.message.to_string(),
    }
}
