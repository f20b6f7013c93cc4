//! The store's schema as migration files (`migrations/NNNN_name.sql`, built into dsh), each
//! recorded in `dsh_schema` with its sha256 once applied. Only commands that write apply them —
//! one process at a time, under the advisory lock `lock_key("dsh-schema", "migrations")` — and
//! an applied migration whose recorded checksum is not this dsh's is refused, naming it. A
//! command that only reads finds the schema as it is: none yet (an empty store), an older one
//! (read as it is), or a newer one (refused: upgrade dsh).

use super::connection::{lock_key, Connection};
use crate::store::StoreError;

/// One migration: its version (its place in [`MIGRATIONS`], from 1), name and SQL.
pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration, in order.
pub const MIGRATIONS: [Migration; 2] = [
    Migration { version: 1, name: "0001_sessions", sql: include_str!("migrations/0001_sessions.sql") },
    Migration {
        version: 2,
        name: "0002_json_safe_retry_view",
        sql: include_str!("migrations/0002_json_safe_retry_view.sql"),
    },
];

/// The schema version this dsh writes; a database of a newer one is refused.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

impl Migration {
    pub fn checksum(&self) -> String {
        crate::fsutil::sha256_hex(self.sql.as_bytes())
    }
}

/// The schema version a database holds; `None` when it holds no dsh schema yet.
pub fn version(connection: &Connection) -> Result<Option<i32>, StoreError> {
    connection.call("schema check", async |client| {
        let exists: bool = client.query_one("SELECT to_regclass('dsh_schema') IS NOT NULL", &[]).await?.get(0);
        match exists {
            true => Ok(client.query_one("SELECT max(version) FROM dsh_schema", &[]).await?.get(0)),
            false => Ok(None),
        }
    })
}

/// Refuses a schema newer than this dsh's.
pub fn check_not_newer(connection: &Connection, url: &str) -> Result<Option<i32>, StoreError> {
    let found = version(connection)?;
    match found {
        Some(found) if found > SCHEMA_VERSION => {
            Err(StoreError::NewerSchema { url: url.to_owned(), found, known: SCHEMA_VERSION })
        }
        found => Ok(found),
    }
}

/// Applies every migration the database lacks, in one transaction under the migrations' lock,
/// after checking the checksums of those already applied.
pub fn migrate(connection: &Connection, url: &str) -> Result<(), StoreError> {
    let key = lock_key("dsh-schema", "migrations");
    let shown = url.to_owned();
    let applied: Result<Result<(), StoreError>, StoreError> = connection.call("migration", async move |client| {
        let transaction = client.transaction().await?;
        transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&key]).await?;
        let exists: bool = transaction.query_one("SELECT to_regclass('dsh_schema') IS NOT NULL", &[]).await?.get(0);
        let recorded = match exists {
            true => recorded(&transaction).await?,
            false => Vec::new(),
        };
        if let Err(refused) = check_recorded(&recorded, &shown) {
            return Ok(Err(refused));
        }
        for migration in MIGRATIONS.iter().filter(|migration| !recorded.iter().any(|(v, _)| *v == migration.version)) {
            transaction.batch_execute(migration.sql).await?;
            transaction.execute("INSERT INTO dsh_schema (version) VALUES ($1)", &[&migration.version]).await?;
        }
        note_checksums(&transaction).await?;
        transaction.commit().await?;
        Ok(Ok(()))
    });
    applied?
}

/// The applied versions and the checksums recorded for them (none before version 2 recorded
/// any).
async fn recorded(
    client: &tokio_postgres::Transaction<'_>,
) -> Result<Vec<(i32, Option<String>)>, tokio_postgres::Error> {
    let has_checksums: bool = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_name = 'dsh_schema' AND column_name = 'checksum')",
            &[],
        )
        .await?
        .get(0);
    let sql = match has_checksums {
        true => "SELECT version, checksum FROM dsh_schema",
        false => "SELECT version, NULL::text FROM dsh_schema",
    };
    Ok(client.query(sql, &[]).await?.iter().map(|row| (row.get(0), row.get(1))).collect())
}

/// `Err` when an applied migration's recorded checksum is not this dsh's, or a version is newer.
fn check_recorded(recorded: &[(i32, Option<String>)], url: &str) -> Result<(), StoreError> {
    for (version, checksum) in recorded {
        let Some(migration) = MIGRATIONS.iter().find(|migration| migration.version == *version) else {
            return Err(StoreError::NewerSchema { url: url.to_owned(), found: *version, known: SCHEMA_VERSION });
        };
        if let Some(checksum) = checksum.as_deref().filter(|checksum| *checksum != migration.checksum()) {
            return Err(StoreError::Query {
                url: url.to_owned(),
                what: "schema check",
                reason: format!(
                    "migration {} ({}) was applied with checksum {checksum}, but this dsh's has {}: the schema \
                     was changed by hand or by another build of dsh",
                    migration.version,
                    migration.name,
                    migration.checksum()
                ),
            });
        }
    }
    Ok(())
}

/// Records each applied migration's name and checksum where none is yet.
async fn note_checksums(client: &tokio_postgres::Transaction<'_>) -> Result<(), tokio_postgres::Error> {
    for migration in &MIGRATIONS {
        client
            .execute(
                "UPDATE dsh_schema SET name = $2, checksum = $3 WHERE version = $1 AND checksum IS NULL",
                &[&migration.version, &migration.name, &migration.checksum()],
            )
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_in_order_and_named_after_their_files() {
        for (index, migration) in MIGRATIONS.iter().enumerate() {
            assert_eq!(migration.version as usize, index + 1);
            assert!(migration.name.starts_with(&format!("{:04}_", index + 1)), "{}", migration.name);
        }
        assert_eq!(check_recorded(&[(1, None), (2, Some(MIGRATIONS[1].checksum()))], "u").ok(), Some(()));
        let changed = check_recorded(&[(1, Some("0".repeat(64)))], "u").unwrap_err();
        assert!(changed.to_string().contains("migration 1 (0001_sessions) was applied with checksum 000"), "{changed}");
        assert!(matches!(check_recorded(&[(3, None)], "u"), Err(StoreError::NewerSchema { found: 3, .. })));
    }
}
