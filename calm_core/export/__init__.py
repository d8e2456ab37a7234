"""A finished run as a package to take away: the export folder (folder), a merged model
(merged), its model card (model_card, merged_card, card_data) and the Hub (hub_id, hub_push)."""
