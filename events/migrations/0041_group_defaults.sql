-- What a launch in a resource group gets when it names no environment or no resources
-- (`ResourceGroupDefaultsSet`, domain::defaults); null: the fallback (the group's most used
-- environment, the smallest preset that fits).
ALTER TABLE ledger.resource_groups ADD COLUMN default_image text, ADD COLUMN default_preset text;
