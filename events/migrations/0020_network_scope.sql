-- The cluster network each agent shares with others (from `AgentRegistered`): the agents of
-- one Docker engine report `engine:<its id>`; none, one that shares none. The scheduler puts
-- a multi-node cluster's kernels on agents of one scope.
ALTER TABLE ledger.agents ADD COLUMN network_scope text;
