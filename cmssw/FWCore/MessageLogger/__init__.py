"""CMSSW's older ``FWCore.MessageLogger`` name of the MessageLogger's fragments."""
