-- ---------------------------------------------------------------------------
-- Task queue 0.2.0 -> 0.3.0: rate limits (rate_limit claims in any
-- rate_period; key_rate_limit per concurrency key in any key_rate_period) and
-- fair claims (fair). The catalog gets the five settings,
-- last, as a fresh install has them (no queue of 0.2.0 has a limit or is
-- fair); create_queue and alter_queue take them: their 0.2.0 definitions step aside under other names for the new
-- ones of 21_queue_settings_api.sql, and 25_queue_wait_grants.sql gives
-- their privileges to the new ones and drops them.
-- ---------------------------------------------------------------------------

ALTER TABLE concurrency.queue
    ADD COLUMN rate_limit integer CHECK (rate_limit >= 1),
    ADD COLUMN rate_period interval CHECK (rate_period > interval '0'),
    ADD CONSTRAINT queue_rate_check CHECK ((rate_limit IS NULL) = (rate_period IS NULL)),
    ADD COLUMN fair boolean NOT NULL DEFAULT false,
    ADD COLUMN key_rate_limit integer CHECK (key_rate_limit >= 1),
    ADD COLUMN key_rate_period interval CHECK (key_rate_period > interval '0'),
    ADD CONSTRAINT queue_key_rate_check CHECK ((key_rate_limit IS NULL) = (key_rate_period IS NULL));

ALTER FUNCTION concurrency.create_queue(text, interval, integer, interval, integer, integer, boolean)
    RENAME TO create_queue_0_2_0;
ALTER FUNCTION concurrency.alter_queue(text, interval, integer, interval, integer, integer)
    RENAME TO alter_queue_0_2_0;
