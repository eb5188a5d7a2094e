"""CMSSW's ``FWCore.MessageService`` (the MessageLogger's fragments)."""
