-- Customized images pushed to the stack's registry: any agent can pull one (the launcher
-- offers it whether or not an agent has it yet), where one that was not is offered only by
-- the agents that hold it. Folded from `SessionCommitEnded`'s `pushed`; images committed
-- before this column say false, which is what their agents did unless a registry was set.
ALTER TABLE ledger.custom_images ADD COLUMN pushed boolean NOT NULL DEFAULT false;
