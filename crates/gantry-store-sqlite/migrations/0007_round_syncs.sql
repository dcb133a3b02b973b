-- How many times the mover's rounds have put the main file on disk (`sync_main`): the moves
-- commit without waiting for the disk; before their rows leave the staging file, a round commits
-- a change of this one row with the file's durability (FULL), whose flush takes every commit
-- before it. Named for the round, the mover's unit of work.
ALTER TABLE walk_syncs RENAME TO round_syncs;
