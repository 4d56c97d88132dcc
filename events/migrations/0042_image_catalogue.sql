-- The catalogue offers session images only. `unlabelled_images`: those of an agent's images
-- whose labels make them no session image (`AgentRegistered`; absent before the rule, so an
-- older agent's images all stay offered). `image_listings`: how an admin listed an image
-- (`ImageListingSet`): `shown` whatever its labels say, `hidden` never (and refused to a
-- launch); an image with no row is offered as its labels say.
ALTER TABLE ledger.agents ADD COLUMN unlabelled_images text[] NOT NULL DEFAULT '{}';
CREATE TABLE ledger.image_listings (
    image   text PRIMARY KEY,
    listing text NOT NULL CHECK (listing IN ('shown', 'hidden'))
);
GRANT SELECT, INSERT, UPDATE, DELETE ON ledger.image_listings TO berth_service;
