// dsl-macros
