"""CMSSW's ``Configuration.ProcessModifiers``: the SONIC process modifiers."""
