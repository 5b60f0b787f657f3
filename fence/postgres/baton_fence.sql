-- Baton's fence for PostgreSQL: load once into the database the lock
-- guards (psql -f baton_fence.sql), then make
--
--     SELECT baton_fence('jobs/nightly', 1099511627777);
--
-- the first statement of every transaction that writes under the lock,
-- with the lock's name and the fencing token of its grant. It raises an
-- error whose message starts with "stale fencing token" when a higher
-- token has been seen for the name, which aborts the transaction; else it
-- records the token and keeps the mark's row locked until the transaction
-- ends, so a stale writer that races a newer one waits for it and then
-- fails. Tokens are numeric(20,0): they pass bigint's 2^63-1.
--
-- Safe to run again: it changes no mark that exists.

CREATE TABLE IF NOT EXISTS baton_fence_marks (
    name  text PRIMARY KEY,
    token numeric(20,0) NOT NULL
        CHECK (token >= 1 AND token <= 18446744073709551615)
);

CREATE OR REPLACE FUNCTION baton_fence(name text, token numeric)
RETURNS numeric
LANGUAGE plpgsql
AS $$
DECLARE
    seen numeric(20,0);
BEGIN
    IF baton_fence.name IS NULL OR baton_fence.token IS NULL THEN
        RAISE EXCEPTION 'baton_fence: name and token must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF baton_fence.token <> trunc(baton_fence.token)
       OR baton_fence.token < 1 OR baton_fence.token > 18446744073709551615 THEN
        RAISE EXCEPTION 'baton_fence: token % is not a fencing token (an integer from 1 to 2^64-1)', baton_fence.token
            USING ERRCODE = 'numeric_value_out_of_range';
    END IF;
    -- The row lock taken here is held to the end of the transaction.
    SELECT m.token INTO seen FROM baton_fence_marks m
     WHERE m.name = baton_fence.name FOR UPDATE;
    IF NOT FOUND THEN
        -- A first writer of the name: a racing one inserts too; the loser
        -- waits for the winner's commit and then locks its row.
        INSERT INTO baton_fence_marks AS m (name, token)
        VALUES (baton_fence.name, baton_fence.token)
        ON CONFLICT ON CONSTRAINT baton_fence_marks_pkey DO NOTHING;
        SELECT m.token INTO seen FROM baton_fence_marks m
         WHERE m.name = baton_fence.name FOR UPDATE;
    END IF;
    IF seen > baton_fence.token THEN
        RAISE EXCEPTION 'stale fencing token % for lock "%": token % was seen', baton_fence.token, baton_fence.name, seen
            USING ERRCODE = 'raise_exception',
                  HINT = 'a later holder of the lock has written; this holder lost the lock and must stop';
    END IF;
    IF seen < baton_fence.token THEN
        UPDATE baton_fence_marks m SET token = baton_fence.token
         WHERE m.name = baton_fence.name;
    END IF;
    RETURN baton_fence.token;
END
$$;
