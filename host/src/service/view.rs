//! What a served turn shows: the front end's own view of it, and the service's part — the
//! message's receipt, the session's `running` status and the text an attempt streams. Its events
//! reach the feed as they become durable, through the log's echo.

use std::sync::Arc;
use std::time::Duration;

use super::hub::{Hub, Receipt};
use super::types::Update;
use crate::agent::view::{RetryNotice, TurnView};
use crate::llm::openai::ToolCall;
use crate::tools::ToolOutcome;

pub(super) struct ServiceView {
    pub hub: Hub,
    pub session: Arc<str>,
    pub receipt: Receipt,
    /// The front end's view of the turn.
    pub shown: Box<dyn TurnView>,
}

impl ServiceView {
    pub(super) fn new(hub: Hub, session: Arc<str>, receipt: Receipt) -> ServiceView {
        let shown = (hub.setup.view)();
        ServiceView { hub, session, receipt, shown }
    }
}

/// Hands `receipt` the message's id, once.
pub(super) fn acknowledge(receipt: &Receipt, message_id: &str) {
    if let Some(reply) = receipt.lock().expect("not poisoned").take() {
        let _ = reply.send(Ok(message_id.to_owned()));
    }
}

impl TurnView for ServiceView {
    fn input_received(&mut self, message_id: &str) {
        acknowledge(&self.receipt, message_id);
        self.hub.publish(Update::Status { session: self.session.clone(), running: true });
        self.shown.input_received(message_id);
    }

    fn attempt_started(&mut self, route: &str) {
        self.shown.attempt_started(route);
    }

    fn text(&mut self, delta: &str) {
        self.hub.publish(Update::Text { session: self.session.clone(), delta: delta.to_owned() });
        self.shown.text(delta);
    }

    fn attempt_ended(&mut self, completed: bool) {
        self.hub.publish(Update::AttemptEnded { session: self.session.clone(), completed });
        self.shown.attempt_ended(completed);
    }

    fn retry_scheduled(&mut self, notice: &RetryNotice) {
        self.shown.retry_scheduled(notice);
    }

    fn counts_down(&self) -> bool {
        self.shown.counts_down()
    }

    fn retry_tick(&mut self, notice: &RetryNotice, remaining: Duration) {
        self.shown.retry_tick(notice, remaining);
    }

    fn retry_done(&mut self) {
        self.shown.retry_done();
    }

    fn turn_ended(&mut self, completed: bool) {
        self.shown.turn_ended(completed);
    }

    fn output_gone(&self) -> bool {
        self.shown.output_gone()
    }

    fn retry_refused(&mut self, row: &str, reason: &str) {
        self.shown.retry_refused(row, reason);
    }

    fn route_switched(&mut self, from: &str, to: &str, code: &str) {
        self.shown.route_switched(from, to, code);
    }

    fn tool_started(&mut self, call: &ToolCall) {
        self.shown.tool_started(call);
    }

    fn tool_progress(&mut self, call: &ToolCall, progress: &str) {
        self.shown.tool_progress(call, progress);
    }

    fn tool_ended(&mut self, call: &ToolCall, outcome: &ToolOutcome) {
        self.shown.tool_ended(call, outcome);
    }

    fn servers_starting(&mut self, rows: &[String]) {
        self.shown.servers_starting(rows);
    }

    fn servers_started(&mut self) {
        self.shown.servers_started();
    }
}
