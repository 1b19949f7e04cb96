"""Money: tiers and ceilings, the create gate, the spend ledger and table, holds, the restore
fence, the payment authority."""
