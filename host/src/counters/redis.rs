//! Counters of a fleet, in Redis (`dsh:counter:<key>`), each update one server-side script;
//! listed with `SCAN` and `MGET`, reset with `DEL`. Circuit breakers likewise, as hashes
//! (`dsh:breaker:<key>`), listed with `SCAN` and `HMGET`.
//!
//! The `redis` crate encodes the commands and parses the replies; this file owns the socket, so
//! that every exchange — connecting, authenticating, each update — ends within [`REDIS_TIMEOUT`]
//! and reads at most [`MAX_REPLY_BYTES`]: a server that accepts connections and never answers, or
//! streams an endless reply, fails the update (the row's `onStoreError` decides) instead of
//! hanging the turn or growing without bound. Credentials in the URL never reach a message.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use dsh_abi::breaker::{BreakerAnswer, BreakerEvent, BreakerPolicy, BreakerState, Phase};
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use super::CounterStore;

/// How long a Redis store may take to connect, or to answer one request, before the update fails.
pub const REDIS_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest reply read from the store; an update's reply is a number of a few bytes.
pub const MAX_REPLY_BYTES: usize = 64 * 1024;

/// [`dsh_abi::store::clamped`] as one script: a ceiling below the floor is the floor.
const ADD_SCRIPT: &str = r"
local value = tonumber(redis.call('GET', KEYS[1]) or ARGV[2])
value = value + tonumber(ARGV[1])
local floor, ceiling = tonumber(ARGV[3]), tonumber(ARGV[4])
if ceiling < floor then ceiling = floor end
if value < floor then value = floor end
if value > ceiling then value = ceiling end
redis.call('SET', KEYS[1], tostring(value))
return tostring(value)
";

/// [`dsh_abi::breaker::apply`] as one script over a hash (`openUntil`, `probeUntil`, `failures`
/// as comma-separated times; no key for a closed circuit without failures); answers `{phase,
/// admitted, probe, openUntil}`. A unit test runs
/// both over the same events against a real server.
const BREAKER_SCRIPT: &str = r"
local state = redis.call('HMGET', KEYS[1], 'openUntil', 'probeUntil', 'failures')
local open_until, probe_until = tonumber(state[1]) or 0, tonumber(state[2]) or 0
local failures = {}
for at in string.gmatch(state[3] or '', '[^,]+') do failures[#failures + 1] = tonumber(at) end
local event, now = ARGV[1], tonumber(ARGV[2])
local limit, window, cooldown = math.max(tonumber(ARGV[3]), 1), tonumber(ARGV[4]), tonumber(ARGV[5])
local function phase()
  if open_until == 0 then return 'closed' elseif now < open_until then return 'open' else return 'half-open' end
end
local function open()
  open_until = math.max(open_until, now + cooldown); probe_until = 0; failures = {}
end
local admitted, probe, current = 0, 0, phase()
if event == 'admit' then
  if current == 'closed' then admitted = 1
  elseif current == 'half-open' and not (probe_until > now) then probe_until = now + cooldown; admitted = 1; probe = 1 end
elseif event == 'failure' then
  if current == 'closed' then
    local kept = {}
    for _, at in ipairs(failures) do if at > now - window then kept[#kept + 1] = at end end
    kept[#kept + 1] = now
    while #kept > limit do table.remove(kept, 1) end
    failures = kept
    if #kept >= limit then open() end
  else open() end
elseif event == 'success' and current == 'half-open' then
  open_until, probe_until, failures = 0, 0, {}
end
local shown = {}
for i, at in ipairs(failures) do shown[i] = string.format('%.17g', at) end
if open_until == 0 and probe_until == 0 and #failures == 0 then
  redis.call('DEL', KEYS[1])
else
  redis.call('HSET', KEYS[1], 'openUntil', string.format('%.17g', open_until),
    'probeUntil', string.format('%.17g', probe_until), 'failures', table.concat(shown, ','))
end
local after = phase()
if after == 'closed' then open_until = 0 end
return {after, admitted, probe, string.format('%.17g', open_until)}
";

/// The prefix of every circuit breaker's Redis key.
const BREAKER_PREFIX: &str = "dsh:breaker:";

/// The variable a Redis store's password is read from when its URL has none, so no layer needs
/// to hold it.
pub const PASSWORD_ENV: &str = "DSH_REDIS_PASSWORD";

pub struct RedisStore {
    /// The URL with its credentials redacted, for messages.
    shown: String,
    info: ConnectionInfo,
    connection: Mutex<Option<TcpStream>>,
    /// Why the store failed during this turn: it is not tried again until the next.
    failed: Mutex<Option<String>>,
}

/// Reads from a socket until a deadline, at most `left` bytes in all.
struct Bounded<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
    left: usize,
}

impl Read for Bounded<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let remaining = self.deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in time"));
        }
        if self.left == 0 {
            let message = format!("a reply longer than {MAX_REPLY_BYTES} bytes");
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, message));
        }
        self.stream.set_read_timeout(Some(remaining))?;
        let room = buf.len().min(self.left);
        let read = self.stream.read(&mut buf[..room])?;
        self.left -= read;
        Ok(read)
    }
}

/// Sends `command` and reads its one reply, within [`REDIS_TIMEOUT`] and [`MAX_REPLY_BYTES`].
fn exchange(stream: &TcpStream, command: &redis::Cmd) -> Result<redis::Value, String> {
    let deadline = Instant::now() + REDIS_TIMEOUT;
    let mut writer = stream;
    stream.set_write_timeout(Some(REDIS_TIMEOUT)).map_err(|err| err.to_string())?;
    writer.write_all(&command.get_packed_command()).map_err(|err| format!("cannot send: {err}"))?;
    let reader = Bounded { stream, deadline, left: MAX_REPLY_BYTES };
    match redis::Parser::new().parse_value(reader) {
        Ok(redis::Value::ServerError(err)) => Err(format!("the server refused: {err:?}")),
        Ok(value) => Ok(value),
        Err(err) if err.is_timeout() => Err(format!("no answer within {} ms", REDIS_TIMEOUT.as_millis())),
        Err(err) => Err(format!("cannot read its answer: {err}")),
    }
}

impl RedisStore {
    /// A store at `url` (`redis://[USER:PASSWORD@]HOST:PORT[/DB]`); it connects at its first update.
    pub fn new(url: &str) -> Result<RedisStore, String> {
        dsh_session::redact::learn_url(url);
        let shown = dsh_session::redact::url(url);
        let mut info = url.into_connection_info().map_err(|err| format!("{shown} is not a Redis URL: {err}"))?;
        if info.redis.password.is_none() {
            info.redis.password = std::env::var(PASSWORD_ENV).ok().filter(|password| !password.is_empty());
        }
        if let Some(password) = &info.redis.password {
            dsh_session::redact::learn(password);
        }
        if !matches!(info.addr, ConnectionAddr::Tcp(..)) {
            return Err(format!("{shown}: only redis://HOST:PORT stores are supported (no TLS, no sockets)"));
        }
        Ok(RedisStore { shown, info, connection: Mutex::new(None), failed: Mutex::new(None) })
    }

    fn connect(&self) -> Result<TcpStream, String> {
        let ConnectionAddr::Tcp(host, port) = &self.info.addr else { unreachable!("checked in new") };
        let cannot = |why: String| format!("cannot reach {}: {why}", self.shown);
        let address = (host.as_str(), *port)
            .to_socket_addrs()
            .map_err(|err| cannot(err.to_string()))?
            .next()
            .ok_or_else(|| cannot("the host has no address".to_owned()))?;
        let stream = TcpStream::connect_timeout(&address, REDIS_TIMEOUT).map_err(|err| cannot(err.to_string()))?;
        let redis = &self.info.redis;
        if let Some(password) = &redis.password {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = &redis.username {
                auth.arg(user);
            }
            exchange(&stream, auth.arg(password)).map_err(|why| cannot(format!("authentication: {why}")))?;
        }
        if redis.db != 0 {
            exchange(&stream, redis::cmd("SELECT").arg(redis.db)).map_err(cannot)?;
        }
        Ok(stream)
    }

    /// Whether the server answers (`PING`).
    pub fn ping(&self) -> Result<(), String> {
        let stream = self.connect()?;
        exchange(&stream, &redis::cmd("PING")).map_err(|why| format!("{}: {why}", self.shown))?;
        *self.connection.lock().map_err(|_| "poisoned".to_owned())? = Some(stream);
        Ok(())
    }
}

/// The prefix of every counter's Redis key.
const KEY_PREFIX: &str = "dsh:counter:";

/// How many keys one `SCAN` step asks for: its reply stays far below [`MAX_REPLY_BYTES`].
const SCAN_BATCH: usize = 256;

impl RedisStore {
    /// Sends one command on the store's connection (connecting first when needed). Once a
    /// command failed, every other fails at once until the next turn begins.
    fn request(&self, command: &redis::Cmd) -> Result<redis::Value, String> {
        let poisoned = || "the Redis store is poisoned".to_owned();
        if let Some(why) = self.failed.lock().map_err(|_| poisoned())?.as_ref() {
            return Err(format!("{why} (not tried again until the next turn)"));
        }
        let mut slot = self.connection.lock().map_err(|_| poisoned())?;
        let outcome = match slot.take() {
            Some(stream) => Ok(stream),
            None => self.connect(),
        }
        .and_then(|stream| {
            let value = exchange(&stream, command).map_err(|why| format!("{}: {why}", self.shown))?;
            *slot = Some(stream);
            Ok(value)
        });
        if let Err(why) = &outcome {
            *self.failed.lock().map_err(|_| poisoned())? = Some(why.clone());
        }
        outcome
    }

    fn number(&self, value: &redis::Value) -> Result<f64, String> {
        let text = match value {
            redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            other => return Err(format!("{} answered {other:?}, not a number", self.shown)),
        };
        text.parse().map_err(|_| format!("{} answered {text:?}, not a number", self.shown))
    }

    /// One `SCAN` step: the next cursor and the keys under `prefix` it found (without it).
    fn scan(&self, prefix: &str, cursor: &str) -> Result<(String, Vec<String>), String> {
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor).arg("MATCH").arg(format!("{prefix}*")).arg("COUNT").arg(SCAN_BATCH);
        let unexpected = |what: &dyn std::fmt::Debug| format!("{} answered {what:?} to SCAN", self.shown);
        let redis::Value::Array(reply) = self.request(&scan)? else { return Err(unexpected(&"not an array")) };
        let [redis::Value::BulkString(next), redis::Value::Array(found)] = &reply[..] else {
            return Err(unexpected(&reply));
        };
        let keys = found
            .iter()
            .filter_map(|key| match key {
                redis::Value::BulkString(bytes) => {
                    String::from_utf8_lossy(bytes).strip_prefix(prefix).map(str::to_owned)
                }
                _ => None,
            })
            .collect();
        Ok((String::from_utf8_lossy(next).into_owned(), keys))
    }

    /// Every key under `prefix` (without it), sorted, each once.
    fn keys(&self, prefix: &str) -> Result<Vec<String>, String> {
        let mut keys = Vec::new();
        let mut cursor = "0".to_owned();
        loop {
            let (next, found) = self.scan(prefix, &cursor)?;
            keys.extend(found);
            if next == "0" {
                break;
            }
            cursor = next;
        }
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// Deletes `keys` under `prefix`; how many existed.
    fn delete(&self, prefix: &str, keys: &[String]) -> Result<usize, String> {
        let mut removed = 0;
        for batch in keys.chunks(SCAN_BATCH) {
            let mut delete = redis::cmd("DEL");
            batch.iter().for_each(|key| {
                delete.arg(format!("{prefix}{key}"));
            });
            match self.request(&delete)? {
                redis::Value::Int(count) => removed += usize::try_from(count).unwrap_or(0),
                other => return Err(format!("{} answered {other:?} to DEL", self.shown)),
            }
        }
        Ok(removed)
    }

    /// The values of `keys` (`None` for a key removed since it was found).
    fn values(&self, keys: &[String]) -> Result<Vec<Option<f64>>, String> {
        let mut get = redis::cmd("MGET");
        keys.iter().for_each(|key| {
            get.arg(format!("{KEY_PREFIX}{key}"));
        });
        match self.request(&get)? {
            redis::Value::Array(values) if values.len() == keys.len() => values
                .iter()
                .map(|value| if *value == redis::Value::Nil { Ok(None) } else { self.number(value).map(Some) })
                .collect(),
            other => Err(format!("{} answered {other:?} to MGET", self.shown)),
        }
    }
}

impl CounterStore for RedisStore {
    fn add(&self, key: &str, delta: f64, initial: f64, floor: f64, ceiling: f64) -> Result<f64, String> {
        let mut update = redis::cmd("EVAL");
        update.arg(ADD_SCRIPT).arg(1).arg(format!("{KEY_PREFIX}{key}")).arg(delta).arg(initial).arg(floor).arg(ceiling);
        self.number(&self.request(&update)?)
    }

    fn breaker(
        &self,
        key: &str,
        event: BreakerEvent,
        policy: &BreakerPolicy,
        now_ms: f64,
    ) -> Result<BreakerAnswer, String> {
        let mut update = redis::cmd("EVAL");
        update.arg(BREAKER_SCRIPT).arg(1).arg(format!("{BREAKER_PREFIX}{key}")).arg(event.as_str());
        update.arg(now_ms).arg(policy.failures).arg(policy.window_ms).arg(policy.cooldown_ms);
        let reply = self.request(&update)?;
        let unexpected = || format!("{} answered {reply:?} to a breaker update", self.shown);
        let redis::Value::Array(fields) = &reply else { return Err(unexpected()) };
        let [redis::Value::BulkString(phase), redis::Value::Int(admitted), redis::Value::Int(probe), until] =
            &fields[..]
        else {
            return Err(unexpected());
        };
        let Some(phase) = Phase::parse(phase) else { return Err(unexpected()) };
        let open_until_ms = self.number(until)?;
        Ok(BreakerAnswer { phase, admitted: *admitted == 1, probe: *probe == 1, open_until_ms })
    }

    fn breakers(&self) -> Result<Vec<(String, BreakerState)>, String> {
        let mut listed = Vec::new();
        for key in self.keys(BREAKER_PREFIX)? {
            let mut get = redis::cmd("HMGET");
            get.arg(format!("{BREAKER_PREFIX}{key}")).arg("openUntil").arg("probeUntil").arg("failures");
            let redis::Value::Array(fields) = self.request(&get)? else { continue };
            let text = |index: usize| match fields.get(index) {
                Some(redis::Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
                _ => String::new(),
            };
            let number = |index: usize| text(index).parse().unwrap_or(0.0);
            let failures = text(2).split(',').filter_map(|at| at.parse().ok()).collect();
            listed.push((key, BreakerState { open_until: number(0), probe_until: number(1), failures }));
        }
        Ok(listed)
    }

    fn remove_breakers(&self, keys: &[String]) -> Result<usize, String> {
        self.delete(BREAKER_PREFIX, keys)
    }

    fn list(&self) -> Result<Vec<(String, f64)>, String> {
        let keys = self.keys(KEY_PREFIX)?;
        let mut listed = Vec::new();
        for batch in keys.chunks(SCAN_BATCH) {
            let values = self.values(batch)?;
            listed.extend(batch.iter().cloned().zip(values).filter_map(|(key, value)| Some((key, value?))));
        }
        Ok(listed)
    }

    fn remove(&self, keys: &[String]) -> Result<usize, String> {
        self.delete(KEY_PREFIX, keys)
    }

    fn begin_turn(&self) {
        if let Ok(mut failed) = self.failed.lock() {
            *failed = None;
        }
    }

    fn describe(&self) -> String {
        self.shown.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A server that accepts connections and then does `serve` with each.
    fn server(serve: fn(TcpStream)) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("redis://:s3cret-pass@{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || serve(stream));
            }
        });
        url
    }

    #[test]
    fn a_server_that_never_answers_fails_the_update_within_the_deadline_without_naming_the_password() {
        let url = server(|stream| {
            std::thread::sleep(Duration::from_secs(30));
            drop(stream);
        });
        let store = RedisStore::new(&url).unwrap();
        let err = store.add("k", 1.0, 0.0, 0.0, 10.0).unwrap_err();
        assert!(err.contains("authentication: no answer within 1000 ms"), "{err}");
        assert!(!err.contains("s3cret-pass") && err.contains("[redacted]"), "{err}");
    }

    #[test]
    fn a_store_that_failed_is_not_tried_again_until_the_next_turn() {
        let url = server(|stream| {
            std::thread::sleep(Duration::from_secs(30));
            drop(stream);
        });
        let store = RedisStore::new(&url).unwrap();
        let first = store.add("k", 1.0, 0.0, 0.0, 10.0).unwrap_err();
        assert!(first.contains("no answer within 1000 ms") && !first.contains("not tried again"), "{first}");
        let second = store.breaker(
            "b",
            BreakerEvent::Admit,
            &BreakerPolicy { failures: 1, window_ms: 1.0, cooldown_ms: 1.0 },
            0.0,
        );
        assert_eq!(second.unwrap_err(), format!("{first} (not tried again until the next turn)"));
        store.begin_turn();
        let third = store.add("k", 1.0, 0.0, 0.0, 10.0).unwrap_err();
        assert_eq!(third, first, "a new turn tries the store again");
    }

    #[test]
    fn an_endless_reply_is_cut_at_the_reply_cap() {
        let url = server(|mut stream| {
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(b"$999999999\r\n");
            let chunk = vec![b'x'; 64 * 1024];
            while stream.write_all(&chunk).is_ok() {}
        });
        let store = RedisStore::new(&url).unwrap();
        let err = store.add("k", 1.0, 0.0, 0.0, 10.0).unwrap_err();
        assert!(err.contains("longer than 65536 bytes"), "{err}");
    }
}
