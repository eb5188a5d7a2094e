"""CMSSW's ``Configuration`` import names (process modifiers, eras), over ``framework.config``."""
