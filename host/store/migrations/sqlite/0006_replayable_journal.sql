-- Schema version 6 (SQLite): a journal a replay can trust, and what code a
-- run used. The twin of migrations/postgres/0006_replayable_journal.sql.
--
-- journal: each row records the map item whose call made it (NULL for the
-- call of a skill node) and its place in that call's journal
-- (entry_index), so a map node's items keep their own journals; the
-- SHA-256 of its request's canonical JSON (request_digest); and a row
-- digest over its request, response, run, seq, node, item, entry index and
-- kind, checked whenever it is read (`journal.rs`). Rows that exist already
-- are marked `legacy`: they are accepted as they are, their item and entry
-- unknown. A row without a digest is refused as corrupt.
--
-- runs.provenance: the SHA-256 of each component the run uses, by skill
-- alias, and where the run was forked from, as canonical JSON; pinned by
-- the run's digest (version `r2:`). NULL for runs created before.
--
-- map_items: the attempt an item's output came from, the item's journal
-- (so a resumed map node that reuses the item still commits its host
-- calls) and a digest over both (NULL in rows written before, which carry
-- neither).
ALTER TABLE journal ADD COLUMN item_index INTEGER;
ALTER TABLE journal ADD COLUMN entry_index INTEGER;
ALTER TABLE journal ADD COLUMN request_digest TEXT;
ALTER TABLE journal ADD COLUMN digest TEXT;
UPDATE journal SET digest = 'legacy';
ALTER TABLE runs ADD COLUMN provenance TEXT;
ALTER TABLE map_items ADD COLUMN attempt INTEGER;
ALTER TABLE map_items ADD COLUMN journal TEXT;
ALTER TABLE map_items ADD COLUMN digest TEXT;
