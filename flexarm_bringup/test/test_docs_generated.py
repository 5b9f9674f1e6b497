"""The shipped parameter files and the README's tables are generated from the code that owns them
(flexarm_bringup.docs): a stale one fails here with the command that regenerates it."""
from flexarm_bringup import docs


def test_generated_documentation_is_current():
    assert docs.stale() == [], 'regenerate with: python -m flexarm_bringup.docs --write'
