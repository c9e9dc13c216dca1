"""The engine: ``AsyncFairQueue`` (the source) and ``FairQueue`` (generated), its mixins, batchers,
handles and workflows."""
