//! `route-failover`: on an outage, send the failed step to the next route right away, with a
//! circuit breaker per route shared by every process of the store.
//!
//! A failure with one of `codes` on a route of `routes` counts against that route's circuit;
//! the step then goes to the next route after it whose circuit admits it (closed, or half-open
//! and this request is the probe) and whose `contextWindow` holds the request — never a route
//! declared smaller than the one the step is on. Other codes, routes not listed and the last
//! route pass: the retry executors below decide. Each turn starts on the first route whose
//! circuit admits it. The circuits live in the store the row names (`store`); this plugin only
//! decides ([`dsh_abi::breaker`] holds the maths, the host applies it where the state is kept).

use dsh_abi::breaker::{BreakerAnswer, BreakerEvent, BreakerPolicy, Phase};
use dsh_abi::config::{COUNTER_STORE_KEY, ROUTES_KEY};
use dsh_abi::retry::MAX_DELAY_MS_INTEGER;
use dsh_abi::{
    Answer, ConfigError, Decision, Hooks, HostContextRef, Key, Kind, LogLevel, Manifest, OncePerTurn, Plugin, RString,
    RequestErrorPayload, RequestSuccess, RouteSwitch, Schema,
};
use serde_json::Value;

const NAME: &str = "route-failover";

const WINDOW: Kind = Kind::integer(1, MAX_DELAY_MS_INTEGER);
/// Distinct non-empty names.
const NAMES: Kind = Kind::list_of(&Kind::Text).distinct();

/// The row's keys; `store` is where the host keeps the circuits (the `counters` capability).
pub const SCHEMA: Schema = Schema::plugin(
    NAME,
    &[
        Key::new(ROUTES_KEY, NAMES, "", "provider names of provider rows, in the order a step tries them"),
        // An outage's codes, unless the row names others.
        Key::new(
            "codes",
            NAMES,
            r#"["SERVER","TIMEOUT","TRANSPORT","RATE_LIMIT","EMPTY_RESPONSE","STREAM_CLOSED"]"#,
            "failure codes that move a step to the next route",
        ),
        Key::new("breaker", Kind::Nested(&BREAKER), "{}", "each route's circuit"),
        Key::new(COUNTER_STORE_KEY, Kind::CounterStore, "\"memory\"", "where the circuits are kept (the host opens it)"),
        Key::new(
            "onStoreError",
            Kind::Choice(&["open", "closed"]),
            "\"open\"",
            "when the store cannot be reached: open fails over as if every circuit were closed, closed does not fail over",
        ),
    ],
);

/// The keys of `breaker`.
pub const BREAKER: Schema = Schema::plugin(
    NAME,
    &[
        Key::new("failures", Kind::integer(1, 1000), "3", "failures within the window that open a route's circuit"),
        Key::new("windowMs", WINDOW, "30000", "the window the failures are counted in, in ms"),
        Key::new("cooldownMs", WINDOW, "30000", "how long an open circuit keeps requests away, in ms"),
    ],
);

fn manifest() -> Manifest {
    Manifest::new(
        NAME,
        env!("CARGO_PKG_VERSION"),
        Hooks::REQUEST_ERROR.union(Hooks::REQUEST_SUCCESS).union(Hooks::COUNTERS).union(Hooks::ROUTES),
        "sends a failed step to the next route at once, with a circuit breaker per route shared like the retry budget",
        &SCHEMA,
    )
}

/// One configured row.
pub struct RouteFailover {
    routes: Vec<String>,
    codes: Vec<String>,
    policy: BreakerPolicy,
    fail_open: bool,
    /// One store warning per turn.
    warned: OncePerTurn,
}

impl RouteFailover {
    pub fn new(_row_id: &str, config: &Value) -> Result<RouteFailover, Vec<ConfigError>> {
        let mut row = SCHEMA.read(config)?;
        if !row.is_set(ROUTES_KEY) {
            row.refuse(ROUTES_KEY, "is required: the provider names of the routes to fail over between");
        }
        let routes = row.strings(ROUTES_KEY);
        if routes.len() == 1 {
            row.refuse(ROUTES_KEY, "names one route: failover needs at least two");
        }
        let codes = row.strings("codes");
        let policy = row.nested("breaker", |breaker| BreakerPolicy {
            failures: breaker.integer("failures") as u32,
            window_ms: breaker.number("windowMs"),
            cooldown_ms: breaker.number("cooldownMs"),
        });
        row.value(COUNTER_STORE_KEY);
        let fail_open = row.text("onStoreError").as_deref() != Some("closed");
        row.finish(RouteFailover { routes, codes, policy, fail_open, warned: OncePerTurn::default() })
    }

    fn breaker(&self, ctx: &HostContextRef<'_>, route: &str, event: BreakerEvent) -> Result<BreakerAnswer, RString> {
        ctx.breaker(format!("{NAME}:{route}").as_str().into(), event, self.policy).into_result()
    }

    /// Whether `route` may take a request of `tokens` from a route whose window is `current`.
    fn fits(ctx: &HostContextRef<'_>, route: &str, current: Option<u64>, tokens: u64) -> bool {
        match ctx.route_context_window(route.into()).into_option() {
            None => true,
            Some(window) => window >= tokens && current.is_none_or(|current| window >= current),
        }
    }

    /// The store could not be reached: warn once per turn.
    fn warn_store(&self, ctx: &HostContextRef<'_>, turn: u64, why: &str) {
        if !self.warned.first(ctx, turn) {
            return;
        }
        let policy = if self.fail_open { "failing over as if every circuit were closed" } else { "not failing over" };
        ctx.log(
            LogLevel::Warn,
            format!("{NAME}: the circuit store cannot be reached ({why}); {policy}").as_str().into(),
        );
    }

    /// The first route after `position` that fits and whose circuit admits the step. When the
    /// store cannot be reached: the first that fits if the row fails open, else none.
    fn next_route(&self, payload: &RequestErrorPayload, ctx: &HostContextRef<'_>, position: usize) -> Option<&str> {
        let current = ctx.route_context_window(payload.provider.as_rstr()).into_option();
        for route in &self.routes[position + 1..] {
            if !Self::fits(ctx, route, current, payload.request_tokens) {
                continue;
            }
            match self.breaker(ctx, route, BreakerEvent::Admit) {
                Ok(answer) if answer.admitted => return Some(route),
                Ok(_) => {}
                Err(why) => {
                    self.warn_store(ctx, payload.turn, why.as_str());
                    return self.fail_open.then_some(route.as_str());
                }
            }
        }
        None
    }
}

/// Why the step moved: `deepseek-official: SERVER`, and the circuit's news when it just opened.
fn reason(payload: &RequestErrorPayload, failed: &Result<BreakerAnswer, RString>) -> String {
    let mut reason = format!("{}: {}", payload.provider, payload.failure.code);
    if let Ok(BreakerAnswer { phase: Phase::Open, open_until_ms, .. }) = failed {
        reason.push_str(&format!("; its circuit is open until {}", dsh_abi::js::number(*open_until_ms)));
    }
    reason
}

impl Plugin for RouteFailover {
    fn on_request_error(&self, payload: &RequestErrorPayload, ctx: &HostContextRef<'_>) -> Result<Answer, String> {
        let provider = payload.provider.as_str();
        let Some(position) = self.routes.iter().position(|route| route == provider) else { return Ok(Answer::Pass) };
        if !self.codes.iter().any(|code| code == payload.failure.code.as_str()) {
            return Ok(Answer::Pass);
        }
        let failed = self.breaker(ctx, provider, BreakerEvent::Failure);
        if let Err(why) = &failed {
            self.warn_store(ctx, payload.turn, why.as_str());
            if !self.fail_open {
                return Ok(Answer::Pass);
            }
        }
        Ok(match self.next_route(payload, ctx, position) {
            Some(route) => {
                let switch = RouteSwitch { route: route.into(), reason: reason(payload, &failed).into() };
                Answer::Decide(Decision::Switch(switch))
            }
            None => Answer::Pass,
        })
    }

    fn on_request_success(&self, success: &RequestSuccess, ctx: &HostContextRef<'_>) -> Result<(), String> {
        let route = success.provider.as_str();
        if self.routes.iter().any(|listed| listed == route) {
            if let Err(why) = self.breaker(ctx, route, BreakerEvent::Success) {
                self.warn_store(ctx, success.turn, why.as_str());
            }
        }
        Ok(())
    }

    fn choose_route(&self, turn: u64, ctx: &HostContextRef<'_>) -> Result<Option<String>, String> {
        for route in &self.routes {
            match self.breaker(ctx, route, BreakerEvent::Admit) {
                Ok(answer) if answer.admitted => return Ok(Some(route.clone())),
                Ok(_) => {}
                Err(why) => {
                    self.warn_store(ctx, turn, why.as_str());
                    return Ok(self.fail_open.then(|| self.routes[0].clone()));
                }
            }
        }
        Ok(None)
    }
}

dsh_abi::export_plugin! {
    manifest = manifest,
    instantiate = RouteFailover::new,
}

#[cfg(test)]
mod tests;
