-- dsh schema version 2. What each applied migration was is recorded with its checksum, so a
-- changed one is noticed. Every stored line is read as JSON even where PostgreSQL's jsonb refuses
-- a line as written (a \u0000 escape, a lone surrogate): dsh_json makes those escapes U+FFFD first
-- (an escape after an escaped backslash is text, and left alone). Which executor writes which
-- policy key is data (dsh_policy_executors, one row per key prefix), not code in the view.
ALTER TABLE dsh_schema ADD COLUMN name text, ADD COLUMN checksum text;

CREATE FUNCTION dsh_json(line text) RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT regexp_replace(
               regexp_replace(
                   regexp_replace(line, '(?<!\\)((?:\\\\)*)\\u0000', '\1\\ufffd', 'g'),
                   '(?<!\\)((?:\\\\)*)\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})',
                   '\1\\ufffd', 'g'),
               '(?<!\\)((?:\\\\)*)(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}',
               '\1\\ufffd', 'g')::jsonb
$$;

CREATE TABLE dsh_policy_executors (
    prefix text PRIMARY KEY,
    executor text NOT NULL
);
INSERT INTO dsh_policy_executors (prefix, executor) VALUES
    ('["relay"', 'relay-retry'),
    ('["dsh-retry/', 'dsh-retry'),
    ('["normal"', 'llm-retry'),
    ('["always"', 'llm-retry');

CREATE OR REPLACE VIEW dsh_retry_records AS
SELECT e.session,
       e.seq,
       (r.line -> 'data' ->> 'turn')::bigint AS turn,
       r.line -> 'data' ->> 'provider' AS provider,
       r.line -> 'data' -> 'failure' ->> 'code' AS code,
       (r.line -> 'data' ->> 'delayMs')::double precision AS delay_ms,
       coalesce(
           (SELECT x.executor FROM dsh_policy_executors x
             WHERE starts_with(r.line -> 'data' ->> 'policyKey', x.prefix)
             ORDER BY length(x.prefix) DESC LIMIT 1),
           'other') AS executor,
       to_timestamp((r.line ->> 'time')::double precision / 1000) AS at
FROM dsh_events e
CROSS JOIN LATERAL (SELECT dsh_json(e.body) AS line) r
WHERE e.type = 'llm/retry';
