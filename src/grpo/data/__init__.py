"""Prompt datasets, their sampler, and the per-prompt statistics the curriculum draws by."""
