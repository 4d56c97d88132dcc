-- The audit chain's seals kept a block to a row: up to a thousand consecutive links in log
-- order, each with its event's position and its hash, where each link had a row of its own
-- (`event_seals`: a heap row and two index entries an event, about a third of what sealing
-- cost). The chain, its hashes and what `verify` can name are the same; the sealer writes one
-- row for what it seals at once, up to a thousand links (a trickle makes small ones). A block's links are the events after the previous block's
-- last, so the blocks' first audit sequences are dense (the first is 1, each next one is the
-- previous one plus its count).
CREATE TABLE event_seal_blocks (
    first_audit_seq bigint   PRIMARY KEY CHECK (first_audit_seq >= 1),
    tx_ids          xid8[]   NOT NULL,
    seqs            bigint[] NOT NULL,
    -- 32 bytes a link, in order.
    hashes          bytea    NOT NULL,
    CHECK (cardinality(tx_ids) >= 1
           AND cardinality(seqs) = cardinality(tx_ids)
           AND octet_length(hashes) = 32 * cardinality(tx_ids))
);
-- Hashes do not compress: stored as they are, without a try at it.
ALTER TABLE event_seal_blocks ALTER COLUMN hashes SET STORAGE EXTERNAL;

-- The seals made so far, moved a thousand to a block, in their order.
INSERT INTO event_seal_blocks (first_audit_seq, tx_ids, seqs, hashes)
SELECT min(audit_seq),
       array_agg(tx_id ORDER BY audit_seq),
       array_agg(seq ORDER BY audit_seq),
       string_agg(hash, ''::bytea ORDER BY audit_seq)
FROM event_seals
GROUP BY (audit_seq - 1) / 1000;

DROP TABLE event_seals;

-- As the seals before them: the services seal, and may never change or remove a seal.
GRANT SELECT, INSERT ON event_seal_blocks TO berth_service;
REVOKE UPDATE, DELETE, TRUNCATE ON event_seal_blocks FROM berth_service;
