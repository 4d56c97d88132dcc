//! PostgreSQL wire types the store needs that tokio-postgres does not ship: `xid8`, and JSON
//! read as borrowed text so that payloads are parsed once, straight into typed events; and how
//! a fold done in memory (a replay, a rebuild) meets its tables: written with one `COPY`, then
//! compared with the live ones.

use std::error::Error;

use bytes::BytesMut;
use tokio_postgres::types::{to_sql_checked, FromSql, IsNull, ToSql, Type};

/// A 64-bit transaction id (`xid8`), as written by `pg_current_xact_id()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Xid8(pub u64);

impl<'a> FromSql<'a> for Xid8 {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn Error + Sync + Send>> {
        let bytes: [u8; 8] = raw.try_into().map_err(|_| "xid8 is not 8 bytes")?;
        Ok(Xid8(u64::from_be_bytes(bytes)))
    }

    fn accepts(ty: &Type) -> bool {
        ty.name() == "xid8"
    }
}

impl ToSql for Xid8 {
    fn to_sql(&self, _: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        out.extend_from_slice(&self.0.to_be_bytes());
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        ty.name() == "xid8"
    }

    to_sql_checked!();
}

/// A `json` or `jsonb` value as the text PostgreSQL sent. For `jsonb` this is the
/// database's canonical rendering, which the audit chain hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawJson<'a>(pub &'a str);

impl<'a> FromSql<'a> for RawJson<'a> {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn Error + Sync + Send>> {
        let text = if *ty == Type::JSONB {
            match raw.split_first() {
                Some((1, rest)) => rest,
                _ => return Err("unsupported jsonb wire version".into()),
            }
        } else {
            raw
        };
        Ok(RawJson(std::str::from_utf8(text)?))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSON || *ty == Type::JSONB
    }
}

/// JSON text to send as a `jsonb` (or `json`) parameter without parsing it in Rust first;
/// PostgreSQL parses and checks it.
#[derive(Debug, Clone, Copy)]
pub struct JsonText<'a>(pub &'a str);

impl ToSql for JsonText<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        if *ty == Type::JSONB {
            out.extend_from_slice(&[1]);
        }
        out.extend_from_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSON || *ty == Type::JSONB
    }

    to_sql_checked!();
}

/// Writes `rows` into `table` (its `columns`, in order) with one binary `COPY`: how a fold
/// done in memory is written out (a replay, a rebuild), far faster than a statement a row.
/// The columns' types are the table's own, asked of the database once.
///
/// The rows come gathered in a slice rather than as an iterator: an iterator built from a
/// closure over borrowed rows, held across the awaits here, makes the caller's future not
/// `Send` (its lifetimes are inferred higher-ranked; rust-lang/rust#110338).
pub async fn copy_rows<const N: usize>(
    tx: &tokio_postgres::Transaction<'_>,
    table: &str,
    columns: [&str; N],
    rows: &[[&(dyn ToSql + Sync); N]],
) -> Result<u64, tokio_postgres::Error> {
    let columns = columns.join(", ");
    let types: Vec<Type> = tx
        .prepare(&format!("SELECT {columns} FROM {table} LIMIT 0"))
        .await?
        .columns()
        .iter()
        .map(|c| c.type_().clone())
        .collect();
    let sink = tx
        .copy_in(&format!("COPY {table} ({columns}) FROM STDIN BINARY"))
        .await?;
    let writer = tokio_postgres::binary_copy::BinaryCopyInWriter::new(sink, &types);
    let mut writer = std::pin::pin!(writer);
    for row in rows {
        writer.as_mut().write(row).await?;
    }
    writer.finish().await
}

/// Drops the indexes of `schema`'s tables that no constraint stands on (a key's stays) and
/// returns what builds them again ([`create_indexes`]): a bulk load into empty tables then
/// sorts each index once instead of inserting every row into it.
pub async fn drop_secondary_indexes(
    tx: &tokio_postgres::Transaction<'_>,
    schema: &str,
) -> Result<Vec<String>, tokio_postgres::Error> {
    let rows = tx
        .query(
            "SELECT pg_get_indexdef(i.indexrelid), format('%I.%I', n.nspname, c.relname)
             FROM pg_index i
             JOIN pg_class c ON c.oid = i.indexrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1
               AND NOT EXISTS (SELECT FROM pg_constraint k WHERE k.conindid = i.indexrelid)
             ORDER BY c.relname",
            &[&schema],
        )
        .await?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<&str> = rows.iter().map(|r| r.get(1)).collect();
    tx.batch_execute(&format!("DROP INDEX {}", names.join(", ")))
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Builds the indexes [`drop_secondary_indexes`] dropped, as they were.
pub async fn create_indexes(
    tx: &tokio_postgres::Transaction<'_>,
    definitions: &[String],
) -> Result<(), tokio_postgres::Error> {
    if definitions.is_empty() {
        return Ok(());
    }
    tx.batch_execute(&definitions.join(";\n")).await
}

/// A table's rows summed up whatever their order: how many there are, and the sum of a hash
/// of each. Two tables whose multisets of rows are equal have equal fingerprints; two that
/// differ have equal ones by a 64-bit collision's chance. Each row's hash is mixed once more
/// before the sum, as PostgreSQL combines a record's column hashes linearly: summed unmixed,
/// two rows that swapped a column's values would leave the sum as it was. One scan and no
/// grouping: on the sessions of a ledger of 85,000, 0.1 s a side against 0.3 s to group both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    rows: i64,
    hash_sum: String,
}

/// Each of `tables` in `schema` summed up ([`Fingerprint`]) over the columns
/// `compared(table, column)` keeps, in one statement. Any connection may sum up one side of a
/// comparison, in the snapshot of the transaction that compares (`SET TRANSACTION SNAPSHOT`),
/// while that one does something else.
pub async fn fingerprints(
    tx: &tokio_postgres::Transaction<'_>,
    tables: &[&str],
    schema: &str,
    compared: impl Fn(&str, &str) -> bool,
) -> Result<Vec<Fingerprint>, tokio_postgres::Error> {
    if tables.is_empty() {
        return Ok(Vec::new());
    }
    let columns = compared_columns(tx, tables, schema, compared).await?;
    let sums: Vec<String> = tables
        .iter()
        .zip(&columns)
        .enumerate()
        .map(|(i, (table, columns))| {
            format!(
                "SELECT {i} AS i, count(*) AS n, coalesce(sum(hashint8extended(
                    hash_record_extended(ROW({}), 0), 0)), 0)::text AS h FROM {schema}.{table}",
                columns.join(", ")
            )
        })
        .collect();
    let rows = tx
        .query(
            &format!(
                "SELECT n, h FROM ({}) sums ORDER BY i",
                sums.join(" UNION ALL ")
            ),
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Fingerprint {
            rows: r.get(0),
            hash_sum: r.get(1),
        })
        .collect())
}

/// The tables among `tables` whose rows in `left_schema` and in `right_schema` differ, each
/// with the rows only the left holds and the rows only the right holds, over the columns
/// `compared(table, column)` keeps: how a replay or a rebuild is compared with the live tables.
pub async fn differing_tables(
    tx: &tokio_postgres::Transaction<'_>,
    tables: &[&str],
    left_schema: &str,
    right_schema: &str,
    compared: impl Fn(&str, &str) -> bool,
) -> Result<Vec<(String, i64, i64)>, tokio_postgres::Error> {
    let left = fingerprints(tx, tables, left_schema, &compared).await?;
    differing_from(tx, tables, (left_schema, &left), right_schema, compared).await
}

/// [`differing_tables`] with the left side's fingerprints summed up already (elsewhere, in
/// the same snapshot). Only a table whose fingerprints differ has its rows grouped and counted
/// ([`differences`]), in memory the transaction is given for it (past it PostgreSQL spills
/// to disk).
pub async fn differing_from(
    tx: &tokio_postgres::Transaction<'_>,
    tables: &[&str],
    (left_schema, left): (&str, &[Fingerprint]),
    right_schema: &str,
    compared: impl Fn(&str, &str) -> bool,
) -> Result<Vec<(String, i64, i64)>, tokio_postgres::Error> {
    let right = fingerprints(tx, tables, right_schema, &compared).await?;
    let unequal: Vec<usize> = (0..tables.len())
        .filter(|&i| left.get(i) != right.get(i))
        .collect();
    if unequal.is_empty() {
        return Ok(Vec::new());
    }
    tx.batch_execute("SET LOCAL work_mem = '64MB'").await?;
    let columns = compared_columns(tx, tables, left_schema, &compared).await?;
    let mut differing = Vec::new();
    for i in unequal {
        let table = tables[i];
        let (left_only, right_only) = differences(
            tx,
            &columns[i],
            &format!("{left_schema}.{table}"),
            &format!("{right_schema}.{table}"),
        )
        .await?;
        if left_only != 0 || right_only != 0 {
            differing.push((table.to_owned(), left_only, right_only));
        }
    }
    Ok(differing)
}

/// The columns of each of `tables` in `schema` that `compared(table, column)` keeps, in their
/// order, one list a table.
async fn compared_columns(
    tx: &tokio_postgres::Transaction<'_>,
    tables: &[&str],
    schema: &str,
    compared: impl Fn(&str, &str) -> bool,
) -> Result<Vec<Vec<String>>, tokio_postgres::Error> {
    let rows = tx
        .query(
            "SELECT table_name::text, column_name::text FROM information_schema.columns
             WHERE table_schema = $1 AND table_name = ANY($2) ORDER BY ordinal_position",
            &[&schema, &tables],
        )
        .await?;
    Ok(tables
        .iter()
        .map(|table| {
            rows.iter()
                .filter(|r| r.get::<_, &str>(0) == *table)
                .map(|r| r.get::<_, String>(1))
                .filter(|column| compared(table, column))
                .collect()
        })
        .collect())
}

/// How many rows two tables of one shape (`left` and `right`, schema-qualified) do not share
/// over `columns`, each way, counted as `EXCEPT ALL` counts them (a row held twice on one
/// side and once on the other differs once). One pass groups both tables' rows together,
/// where two `EXCEPT ALL`s hash every row of both tables twice (half the time on a ledger of
/// 85,000 sessions).
async fn differences(
    tx: &tokio_postgres::Transaction<'_>,
    columns: &[String],
    left: &str,
    right: &str,
) -> Result<(i64, i64), tokio_postgres::Error> {
    let columns = columns.join(", ");
    let row = tx
        .query_one(
            &format!(
                "SELECT coalesce(sum(greatest(l - r, 0)), 0)::bigint,
                        coalesce(sum(greatest(r - l, 0)), 0)::bigint
                 FROM (SELECT count(*) FILTER (WHERE side = 0) AS l,
                              count(*) FILTER (WHERE side = 1) AS r
                       FROM (SELECT {columns}, 0 AS side FROM {left}
                             UNION ALL SELECT {columns}, 1 FROM {right}) both_sides
                       GROUP BY {columns}) grouped"
            ),
            &[],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}
