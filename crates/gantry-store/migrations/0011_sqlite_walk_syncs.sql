-- SQLite only: a migration whose description starts with "sqlite" runs there alone (lib.rs).
--
-- How many times the walks of staged events (merge.rs) have put the main file on disk. The moves
-- commit without waiting for the disk; before their rows leave the staging file, a walk commits a
-- change of this row with the file's durability (FULL), whose flush takes every commit before it.
-- It has to change a row: SQLite writes no page for an UPDATE that leaves a row as it was, and a
-- commit that wrote no page flushes nothing. The staging file has the same table (merge.rs).
CREATE TABLE walk_syncs (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    syncs INTEGER NOT NULL
);
