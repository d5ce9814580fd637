"""Training the DSpark-style draft head for the embedded model: its self-distillation data (``data``) and
recipe (``train``), and the shipped weights in smollm2-135m/. The head and the drafter that serves it are
`lossless.engine.head`: this package imports the engine, never the reverse."""
