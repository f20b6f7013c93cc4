-- The tables and the view of retry records (dsh schema version 1).
CREATE TABLE dsh_schema (version integer NOT NULL);
CREATE TABLE dsh_sessions (
    id text PRIMARY KEY,
    created_at bigint,
    header text NOT NULL,
    meta text NOT NULL DEFAULT '{}'
);
CREATE TABLE dsh_events (
    session text NOT NULL REFERENCES dsh_sessions (id),
    line bigint NOT NULL,
    seq bigint,
    type text NOT NULL,
    body text NOT NULL,
    PRIMARY KEY (session, line),
    UNIQUE (session, seq)
);
CREATE TABLE dsh_session_files (
    session text NOT NULL REFERENCES dsh_sessions (id),
    name text NOT NULL,
    content bytea NOT NULL,
    PRIMARY KEY (session, name)
);
CREATE VIEW dsh_retry_records AS
SELECT e.session,
       e.seq,
       (e.body::jsonb -> 'data' ->> 'turn')::bigint AS turn,
       e.body::jsonb -> 'data' ->> 'provider' AS provider,
       e.body::jsonb -> 'data' -> 'failure' ->> 'code' AS code,
       (e.body::jsonb -> 'data' ->> 'delayMs')::double precision AS delay_ms,
       CASE
           WHEN e.body::jsonb -> 'data' ->> 'policyKey' LIKE '["relay"%' THEN 'relay-retry'
           WHEN e.body::jsonb -> 'data' ->> 'policyKey' LIKE '["dsh-retry/%' THEN 'dsh-retry'
           WHEN e.body::jsonb -> 'data' ->> 'policyKey' LIKE '["normal"%'
             OR e.body::jsonb -> 'data' ->> 'policyKey' LIKE '["always"%' THEN 'llm-retry'
           ELSE 'other'
       END AS executor,
       to_timestamp((e.body::jsonb ->> 'time')::double precision / 1000) AS at
FROM dsh_events e
WHERE e.type = 'llm/retry';
