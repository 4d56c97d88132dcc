-- How far each durable subscription's consumer acknowledged the log, by the subscription's id
-- (fresh each time a name is made), written by every gateway against this database so that
-- a consumer that reconnects to another goes on from the same place. Only forward: an
-- acknowledgement at or before the kept one changes nothing. Not an event: a consumer
-- acknowledges as often as it reads, and events about reading the log would swell the log
-- they describe; the subscriptions themselves are events (`SubscriptionCreated`,
-- `SubscriptionDeleted`). A row outlives its deleted subscription only until the deletion's
-- answer (the gateway forgets it then).
CREATE SCHEMA IF NOT EXISTS feeds;
GRANT USAGE ON SCHEMA feeds TO berth_service;
CREATE TABLE IF NOT EXISTS feeds.acknowledged (
    subscription_id uuid        PRIMARY KEY,
    tx_id           xid8        NOT NULL,
    seq             bigint      NOT NULL,
    acked_at        timestamptz NOT NULL DEFAULT now()
);
GRANT SELECT, INSERT, UPDATE, DELETE ON feeds.acknowledged TO berth_service;
