"""What the tests share: tiny real models, the rules every engine must keep as checks, specchat
run as a user runs it, and the app driven by Pilot. Fixtures stay in the conftest.py files
beside the tests that use them; these are plain functions and classes, imported by name."""
